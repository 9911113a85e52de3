"""From prompts to what a step trains on. Imports tinygrpo.base, data, model and algorithm at most.

config.py         the rollout's options: SamplingParams (the decoder's settings), RolloutConfig (G, tools,
                  which prompts, which are sampled again)
prompts.py        which prompts a step draws, in what order, and each prompt's pass-rate estimate
sampling.py       the decode loop: G completions of each prompt, one token at a time (the sampler itself)
static_decode.py  the same completions from a decode of static shapes, capturable as a CUDA graph
passes.py         the sample_allocation rules that sample in passes (screen, until_signal)
generation.py     one step's rollout: sample a round, score it, its advantages over the global batch, refill
refill.py         rounds beyond the first: explore rounds, dynamic sampling
scoring.py        completions to text, then every reward function (TRL's calling convention)
round.py          the typed hand-offs of a round (Round, ScoredBatch) and the merge of a prompt's passes
batch.py          the Batch the update trains on
tool_calls.py     tools called inside a completion: answered while decoding, left out of the loss
environment.py    an environment: its tools or its factory, its syntax, its replies
tool_worker.py    the environment's calls in a worker process, each within its deadline
environments/     the built-in environments
evaluation.py     held-out evaluation: greedy accuracy and pass@k under the task's verifier
"""
