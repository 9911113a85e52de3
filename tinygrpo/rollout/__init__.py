"""From prompts to what a step trains on: which prompts (prompts.py, prompt_stats.py), G completions of each
(sampling.py, with an environment's tools: tool_calls.py, environment.py, environments/), their rewards and
advantages (generation.py), the rules that sample in passes (sampling_passes.py), and the typed hand-offs (round.py,
batch.py); distributed.py the processes a batch is spread over. Imports tinygrpo.data, model and algorithm at most.

`from tinygrpo.rollout import sample_completions` (this package's old single module) still works.
"""

from __future__ import annotations

import importlib
from typing import Any

_OLD_MODULES = ("tinygrpo.rollout.sampling", "tinygrpo.model.text")  # where the old module's names are now


def __getattr__(name: str) -> Any:  # (PEP 562: the old module's names, imported on first use)
    if not name.startswith("__"):
        for path in _OLD_MODULES:
            module = importlib.import_module(path)
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
