"""The update of one generated batch. Imports tinygrpo.base, data, model, algorithm and rollout (the Batch it trains
on) at most.

    config.py         the update's options: BatchConfig (batches, steps, passes), OptimizerConfig (AdamW, schedule)
    loss.py           the GRPO loss of a mini-batch: the clipped surrogate, the KL, the aggregation
    loss_terms.py     the loss's variants: token masks and weights, the KL's estimators and correction
    policy_update.py  the passes over mini-batches, with their reference and old log-probs
    optim.py          AdamW and its schedule, backward, clip and step
"""
