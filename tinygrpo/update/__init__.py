"""The update of one generated batch: the GRPO loss of a mini-batch (loss.py), the passes over mini-batches with
their reference and old log-probs (policy_update.py), and AdamW with its schedule, clipping and step (optim.py).
Imports tinygrpo.data, model, algorithm and rollout (the Batch it trains on) at most.
"""
