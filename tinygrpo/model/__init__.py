"""How a causal language model is run, whatever the model. Imports tinygrpo.base and tinygrpo.data at most.

backend.py        the scoring forward of prompt + completion (plain, or TinyLM's grouped one that encodes each
                  prompt once for its G completions) and the decoder that samples with a KV cache
static_shapes.py  the same on a few padded shapes, and CUDA-graph captures of it (cuda_graphs)
text.py           completion ids back to text, <eos> kept
memory.py         the memory a run's sizes need at once, estimated from the model's shape
"""
