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

`import tinygrpo` stays cheap: import the modules themselves. A module's path from before this layout
(`tinygrpo.core`, `tinygrpo.trainer`, `tinygrpo.task`, ...) still imports, as the same module, with a
DeprecationWarning naming its new place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"

# old module -> its place now ("rollout" and "update" are packages now: their __init__ keeps the old names)
MOVED = {
    "problems": "data.problems",
    "task": "data.task",
    "tasks": "data.tasks",
    "writes": "data.writes",
    "progress": "data.progress",
    "backend": "model.backend",
    "core": "algorithm.core",
    "fast": "algorithm.fast",
    "advantage_estimators": "algorithm.advantage_estimators",
    "policy_losses": "algorithm.policy_losses",
    "loss_config": "algorithm.loss_config",
    "group_sizes": "algorithm.group_sizes",
    "allocation": "algorithm.allocation",
    "forecast": "algorithm.forecast",
    "bandit": "algorithm.bandit",
    "exact": "algorithm.exact",
    "round": "rollout.round",
    "batch": "rollout.batch",
    "generation": "rollout.generation",
    "sampling_passes": "rollout.sampling_passes",
    "prompts": "rollout.prompts",
    "prompt_stats": "rollout.prompt_stats",
    "tool_calls": "rollout.tool_calls",
    "environment": "rollout.environment",
    "environments": "rollout.environments",
    "distributed": "rollout.distributed",
    "loss": "update.loss",
    "optim": "update.optim",
    "config": "run.config",
    "options_rollout": "run.options_rollout",
    "options_update": "run.options_update",
    "recipe": "run.recipe",
    "checks": "run.checks",
    "launch": "run.launch",
    "checkpoint": "run.checkpoint",
    "state": "run.state",
    "trainer": "run.trainer",
    "metrics": "run.metrics",
    "metrics_io": "run.metrics_io",
    "run_logs": "run.run_logs",
    "run_end": "run.run_end",
    "watch": "run.watch",
    "evaluation": "run.evaluation",
    "validation": "run.validation",
    "sft": "run.sft",
    "report": "run.report",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `tinygrpo.<old>[.sub]` as the module at its new path: one module object under both names, so that
    classes, registries and monkeypatches are shared. `python -m tinygrpo.report` runs too (get_code)."""

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__ or parts[1] not in MOVED:
            return None
        new = ".".join([__name__, MOVED[parts[1]], *parts[2:]])
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        spec = importlib.util.spec_from_loader(
            fullname, self, is_package=real.submodule_search_locations is not None
        )
        spec.loader_state = real
        if real.submodule_search_locations is not None:
            spec.submodule_search_locations = list(real.submodule_search_locations)
        return spec

    def create_module(self, spec):
        warnings.warn(f"{spec.name} is now {spec.loader_state.name}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(spec.loader_state.name)

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state  # (the import system set the old name's spec on it)

    def get_code(self, fullname):
        real = self.find_spec(fullname).loader_state
        return real.loader.get_code(real.name)


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
