"""The math of GRPO as pure functions on tensors, and the options of the parts that are registries. Imports
tinygrpo.base, data and model at most.

    core.py                  every formula: log-probs, the clipped surrogate, KL estimators, aggregation, group
                             advantages, each with the branch its usual case takes beside the general form
    advantage_estimators.py  the registered advantage estimators (`@register_adv_est`) and their options
                             (AdvantageConfig)
    policy_losses.py         the registered policy losses (`@register_policy_loss`), their token masks, and the loss's
                             options (LossConfig: the loss, the KL and the entropy bonus)
    group_sizes.py           groups of any size: advantages computed size by size
    allocation.py            how many samples a prompt gets (the knapsack's math)
    forecast.py              the signal forecast before the first step
"""
