"""How a causal language model is run, whatever the model: the scoring forward of prompt + completion (plain, or
TinyLM's grouped one that encodes each prompt once for its G completions), the decoder that samples token by token
with a KV cache (backend.py), and completion ids back to text (text.py). Imports tinygrpo.data at most.
"""
