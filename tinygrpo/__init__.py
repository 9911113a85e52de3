"""tinygrpo: token-level GRPO on a tiny character transformer, checked against exact tabular oracles.

A step's data flows through one package per stage; each package imports only the ones listed above it
(tests/test_layout.py fails on a backwards import, two modules importing each other, or a cycle):

    base/       what every layer uses: processes, files written whole, progress bars, options and their parser
    data/       problem sets on disk, the task registry and the tasks, the verifier and the checks data must pass
    model/      how a causal LM is run: its forward (plain or grouped), its decoder (KV cache), ids <-> text, memory
    algorithm/  the math of GRPO as pure functions on tensors (advantages, policy losses, KL) and their options
    rollout/    prompts -> G completions each (tools included) -> rewards -> advantages: what a step trains on
    update/     that batch -> the loss -> backward -> clip -> AdamW
    sft/        supervised training of a reference policy (train_sft.py)
    run/        a GRPO run: its options, the launch, the trainer's loop, checkpoints, logs, the report
    oracles/    exact tabular oracles (the seed tutorials' bandit, exact enumeration): only studies and tests use them

nano_grpo.py, beside the package, is the plain algorithm in one file (tests/test_nano_grpo.py: the same run).

`import tinygrpo` stays cheap: import the modules themselves.
"""

__version__ = "0.1.0"
