"""Exact oracles that the trainer's math is checked against; only studies and tests import them (tests/test_layout.py:
nothing in the library may). Imports tinygrpo.data, model and algorithm (the math they share with the trainer).

    bandit.py            the seed tutorials' tabular GRPO (a table of answers per question), step for step
    completion_space.py  every completion of a small model, enumerated, and its log-probability
    exact.py             expected reward, gradient and KL of a policy, exactly, by enumerating every completion
"""
