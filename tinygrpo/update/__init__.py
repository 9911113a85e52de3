"""The update of one generated batch: the GRPO loss of a mini-batch (loss.py), the passes over mini-batches with
their reference and old log-probs (policy_update.py), and AdamW with its schedule, clipping and step (optim.py).
Imports tinygrpo.data, model, algorithm and rollout (the Batch it trains on) at most.

`from tinygrpo.update import PolicyUpdate` (this package's old single module) still works.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # (PEP 562: the old module's names, imported on first use)
    module = importlib.import_module("tinygrpo.update.policy_update")
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
