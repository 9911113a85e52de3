"""The math of GRPO as pure functions on tensors, and the oracles that check it.

core.py holds every formula (log-probs, the clipped surrogate, KL estimators, aggregation, group advantages), each
with the branch its usual case takes (no NaN reward, an on-policy ratio) beside the general form; advantage_estimators.py and policy_losses.py the registered
variants (`@register_adv_est`, `@register_policy_loss`); group_sizes.py groups of any size; allocation.py how many
samples a prompt gets; forecast.py the signal forecast. The oracles: bandit.py (the seed tutorials' tabular
GRPO) and exact.py (expected reward, gradient and KL by enumerating every completion). Imports tinygrpo.data and
tinygrpo.model at most.
"""
