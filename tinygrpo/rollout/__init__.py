"""From prompts to what a step trains on: which prompts (prompts.py, prompt_stats.py), G completions of each
(sampling.py, with an environment's tools: tool_calls.py, environment.py, environments/), their rewards and
advantages (generation.py), the rules that sample in passes (sampling_passes.py), and the typed hand-offs (round.py,
batch.py); distributed.py the processes a batch is spread over. Imports tinygrpo.data, model and algorithm at most.
"""
