"""Supervised training of a reference policy (train_sft.py): the model GRPO starts from and the KL is taken to.
Imports tinygrpo.base, data, model, rollout and update at most.

    config.py   SFTConfig: the reference's options (TRL's names), a task's recipe by name
    targets.py  each training problem's target completion, and what of it is the environment's (left out of the loss)
    train.py    the recipe itself: the model, the loop, the held-out accuracy, the files; portable kernels in a child
"""
