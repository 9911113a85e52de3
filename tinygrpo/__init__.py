"""tinygrpo: token-level GRPO on a tiny character transformer, checked against exact tabular oracles.

A step's data flows through one package per stage; each package imports only the ones listed above it
(tests/test_layout.py fails on a backwards import or a cycle):

    data/       problem sets on disk, the task registry and the tasks, files written whole
    model/      how a causal LM is run: its forward (plain or grouped), its decoder (KV cache), ids <-> text
    algorithm/  the math of GRPO as pure functions on tensors (advantages, policy losses, KL) and its oracles
    rollout/    prompts -> G completions each (tools included) -> rewards -> advantages: what a step trains on
    update/     that batch -> the loss -> backward -> clip -> AdamW
    run/        the trainer's loop and its options, evaluation, logs, checkpoints, the report, SFT

nano_grpo.py, beside the package, is the plain algorithm in one file (tests/test_nano_grpo.py: the same run).

`import tinygrpo` stays cheap: import the modules themselves.
"""

__version__ = "0.1.0"
