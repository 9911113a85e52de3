"""Crash-safe checkpoints of a run's components: written under a temporary name, moved into place when complete.

Every component that has state owns it, as `state_dict()` / `load_state_dict()` (the Stateful protocol below); this
module saves and restores a named set of them, and never looks inside. A checkpoint directory `checkpoint-<step>`
holds what `accelerator.save_state` writes (model weights as safetensors, optimizer, per-process RNG states; loaded
back with `weights_only=True`), `trainer_state.json` (the state of every shared component, by name: the same on
every process, written once), `<name>_<rank>.json` and `<name>_<rank>.safetensors` (each process's own components:
JSON values, and the tensors found in them), `<name>.safetensors` for extra models (the reference while it is
synced), the run's settings (`grpo_config.json`) and a manifest of every file's size and SHA-256 (`manifest.json`),
written last. (accelerate's `register_for_checkpointing` would pickle the objects, once per node: the
per-process sampling state and readable JSON are why it is not used.)
A kill at any moment leaves either no `checkpoint-<step>` or a complete one: the directory is renamed into place
after everything in it is written and flushed, and `latest` only ever considers complete ones. A checkpoint damaged
later (a truncated or edited file) fails its manifest: `latest` skips it, and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn as nn
from safetensors.torch import load_file, load_model, save_file, save_model

from tinygrpo.base.files import as_write_error, named_save_errors, save_model_files, write_atomic, writing
from tinygrpo.run.config import ConfigError, GRPOConfig
from tinygrpo.run.report import write_report
from tinygrpo.run.report.curves import plot_metrics
from tinygrpo.update.policy_update import NonFiniteError

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "grpo_config.json"
MANIFEST_FILE = "manifest.json"


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SaveError(RuntimeError):
    """A checkpoint could not be written (disk full, permissions): what was kept is in the message."""


def save_checkpoint(
    out: Path,
    step: int,
    acc,
    procs,
    *,
    shared: dict[str, Stateful],
    per_process: dict[str, Stateful],
    models: dict[str, nn.Module],
    config: dict,
    keep: int,
) -> Path:
    """Write checkpoint-<step> in `out` (see the module docstring) and keep the newest `keep`. A failure on one
    process is settled by all of them at each hand-off (procs.any), so that none waits for a process that has given
    up: the process that failed raises a SaveError saying why, the others an empty one."""
    final, tmp = out / f"checkpoint-{step}", out / f".tmp-checkpoint-{step}"
    # What each writer raises for a full disk (OSError, SafetensorError, torch's RuntimeError) becomes one
    # WriteError naming the file; any other exception is also settled by all processes, then raised as it is.
    failed: BaseException | None = None
    published = False
    try:
        if procs.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        procs.wait()
        with named_save_errors():
            acc.save_state(str(tmp), safe_serialization=True)
        for name, component in per_process.items():
            _write_state(tmp, f"{name}_{procs.rank}", component.state_dict())
    except Exception as e:  # noqa: BLE001  (settled below, with the other processes)
        failed = as_write_error(e, tmp) or e
    if not procs.any(failed is not None) and procs.is_main:
        try:
            for name, model in models.items():
                path = tmp / f"{name}.safetensors"
                with writing(path):
                    save_model(model, str(path))  # (tied weights stored once)
            state = {"num_processes": procs.num, **{name: c.state_dict() for name, c in shared.items()}}
            write_json_atomic(tmp / STATE_FILE, state)
            write_json_atomic(tmp / CONFIG_FILE, config)
            write_manifest(tmp)
            with writing(tmp):
                publish(tmp, final)
            published = True
            with writing(out):
                prune(out, keep)
        except Exception as e:  # noqa: BLE001
            failed = as_write_error(e, tmp) or e
    if procs.any(failed is not None):
        if procs.is_main:
            shutil.rmtree(tmp, ignore_errors=True)  # a partial checkpoint is of no use
        raise _save_error(failed, published, step, final, out)
    return final


def _write_state(directory: Path, name: str, state: dict) -> None:
    """A component's state as <name>.json and, for its tensors, <name>.safetensors."""
    plain, tensors = _split_tensors(state)
    write_json_atomic(directory / f"{name}.json", plain)
    if tensors:
        path = directory / f"{name}.safetensors"
        with writing(path):
            save_file(tensors, str(path))


def _save_error(
    failed: BaseException | None, published: bool, step: int, final: Path, out: Path
) -> BaseException:
    """What a failed save raises: an empty SaveError on a process that did not fail, the failure itself if it is
    not a write's, else a SaveError saying what was not written and what was kept."""
    if failed is None:
        return SaveError("")
    if not isinstance(failed, OSError):
        return failed
    if published:  # (only the removal of an older checkpoint failed)
        return SaveError(
            f"step {step}: saved {final}, but could not remove an older checkpoint: "
            f"{failed.strerror or failed} ({failed.filename}); {last_checkpoint(out)}"
        )
    return SaveError(
        f"step {step}: could not write the checkpoint: {failed.strerror or failed}"
        + (f" ({failed.filename})" if failed.filename else "")
        + f"; {last_checkpoint(out)}"
    )


def load_checkpoint(
    path: Path,
    acc,
    procs,
    *,
    shared: dict[str, Stateful],
    per_process: dict[str, Stateful],
    models: dict[str, nn.Module],
    check_config: Callable[[dict], None],
) -> None:
    """Restore what save_checkpoint wrote into the same set of components; `check_config` is given the saved
    settings first. A file that cannot be read is one ConfigError naming the checkpoint and the cause."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
        if state["num_processes"] != procs.num:
            raise ConfigError(
                f"checkpoint {path} was written by {state['num_processes']} processes; resume with the same "
                f"number (this launch has {procs.num})"
            )
        if (path / CONFIG_FILE).is_file():
            check_config(json.loads((path / CONFIG_FILE).read_text()))
        acc.load_state(str(path))
        for name, component in shared.items():
            component.load_state_dict(state[name])
        for name, component in per_process.items():
            plain = json.loads((path / f"{name}_{procs.rank}.json").read_text())
            tensors = path / f"{name}_{procs.rank}.safetensors"
            component.load_state_dict(
                _join_tensors(plain, load_file(str(tensors)) if tensors.is_file() else {})
            )
        for name, model in models.items():
            if (path / f"{name}.safetensors").is_file():
                load_model(model, str(path / f"{name}.safetensors"))
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001  (a damaged file of the user's checkpoint: say which and why)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot resume from {path}: {first}") from None


def _split_tensors(state: dict, prefix: str = "") -> tuple[dict, dict[str, torch.Tensor]]:
    """A state dict -> (its JSON values, its tensors by "/"-joined key path), so tensors go to safetensors."""
    plain: dict = {}
    tensors: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            tensors[prefix + key] = value.contiguous()
        elif isinstance(value, dict):
            plain[key], inner = _split_tensors(value, f"{prefix}{key}/")
            tensors.update(inner)
        else:
            plain[key] = value
    return plain, tensors


def _join_tensors(plain: dict, tensors: dict[str, torch.Tensor]) -> dict:
    """The inverse of _split_tensors."""
    for path, tensor in tensors.items():
        *parents, leaf = path.split("/")
        node = plain
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = tensor
    return plain


def last_checkpoint(output_dir: str | Path, resume: bool = False) -> str:
    """The newest complete checkpoint in words, for an error message: after a failed write, what was kept; with
    `resume` (a run stopped by an error), how to resume from it, or that there is nothing to resume from."""
    kept = checkpoint_dirs(output_dir)
    if kept:
        hint = ", to resume from with --resume_from_checkpoint latest" if resume else ""
        return f"the last complete checkpoint is {kept[-1]}{hint}"
    return "there is no checkpoint to resume from" if resume else "no checkpoint was kept"


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in out.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found) if (p / STATE_FILE).is_file()]


def resolve_checkpoint(spec: str, output_dir: str | Path, say: Callable[[str], None] = print) -> Path:
    """'latest' (or 'true': TRL's resume_from_checkpoint=True, a CLI's `--resume_from_checkpoint true`) -> the newest
    complete checkpoint in output_dir that verifies (each one that does not is skipped, with a line saying why);
    otherwise the given directory, which must verify."""
    if spec in ("latest", "true", "True") and not (Path(spec) / STATE_FILE).is_file():
        found = checkpoint_dirs(output_dir)
        for path in reversed(found):
            problem = verify(path)
            if problem is None:
                return path
            say(f"skipping {path}: {problem}")
        raise ConfigError(
            f"resume_from_checkpoint={spec}: no complete checkpoint in {output_dir}"
            + (" that verifies" if found else "")
        )
    path = Path(spec)
    if not (path / STATE_FILE).is_file():
        raise ConfigError(f"resume_from_checkpoint={spec}: not a checkpoint directory (no {STATE_FILE})")
    problem = verify(path)
    if problem is not None:
        raise ConfigError(f"resume_from_checkpoint={spec}: {problem}")
    return path


def write_manifest(path: Path) -> None:
    """Size and SHA-256 of every file in a checkpoint, written last, just before the checkpoint is published."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    manifest = {str(p.relative_to(path)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    write_json_atomic(path / MANIFEST_FILE, manifest)


def verify(path: Path) -> str | None:
    """None if every file of the manifest is there with its size and hash; else what is wrong. (A checkpoint
    written before manifests existed has none and is taken as it is.)"""
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as e:
        return f"its manifest cannot be read ({e})"
    for name, want in manifest.items():
        p = path / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != want["bytes"]:
            return f"{name} has {p.stat().st_size:,} bytes, the manifest says {want['bytes']:,}"
        if _sha256(p) != want["sha256"]:
            return f"{name} does not match its SHA-256 in the manifest"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_tree(path: Path) -> None:
    """Flush every file under path to disk, so that the rename that publishes it comes after the data."""
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def write_json_atomic(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj))


def publish(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written checkpoint into place (an existing one of the same step is replaced)."""
    fsync_tree(tmp_dir)
    if final_dir.exists():
        old = final_dir.with_name(final_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final_dir, old)
        try:
            os.replace(tmp_dir, final_dir)
        except OSError:
            # the complete checkpoint back in place: a failed save must not lose it
            with contextlib.suppress(OSError):
                os.replace(old, final_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)


def prune(output_dir: str | Path, keep: int) -> None:
    """Delete the oldest complete checkpoints beyond `keep`, and leftovers of interrupted saves or deletions.

    A checkpoint is first renamed out of the `checkpoint-<step>` namespace, then deleted: a kill during the delete
    leaves a `.del-` directory that nothing mistakes for a checkpoint.
    """
    out = Path(output_dir)
    for p in checkpoint_dirs(out)[:-keep]:
        doomed = p.with_name(".del-" + p.name)
        os.replace(p, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    for pattern in (".tmp-checkpoint-*", ".del-checkpoint-*", "checkpoint-*.old"):
        for p in out.glob(pattern):
            shutil.rmtree(p, ignore_errors=True)


# Settings a resumed run may change: they decide what is logged, saved or shown, not what is trained. (max_steps
# too, when the learning-rate schedule does not depend on it; threads change float rounding, not the run.)
RESUMABLE_CHANGES = frozenset(
    {
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "output_dir",
        "dataset_test_split",
        "logging_steps",
        "eval_steps",
        "eval_pass_k",
        "save_steps",
        "save_total_limit",
        "num_completions_to_print",
        "log_completions",
        "report_to",
        "run_name",
        "metric_for_best_model",  # (callbacks' state starts afresh on resume)
        "greater_is_better",
        "disable_tqdm",
        "make_plots",
        "torch_num_threads",
        "signal_forecast_prompts",  # (sampled before the first step, from generators of its own)
        "signal_forecast_min",
    }
)


def resume_point(cfg: GRPOConfig, say=print) -> Path | None:
    """The checkpoint to resume from (verified against its manifest; `latest` skips, and says so, any that does
    not verify), after checking that this launch's settings would continue the same run."""
    if not cfg.resume_from_checkpoint:
        return None
    path = resolve_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir, say)
    saved = path / CONFIG_FILE
    if saved.is_file():
        try:
            before = json.loads(saved.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"resume_from_checkpoint: cannot read {saved}: {e}") from None
        check_same_run(before, cfg, path)
    return path


def check_same_run(before: dict, cfg: GRPOConfig, path: Path) -> None:
    now = asdict(cfg)
    allowed = set(RESUMABLE_CHANGES)
    if now["max_steps"] is None:  # (num_train_epochs, compared itself, gives it from the same split)
        allowed.add("max_steps")
    if before.get("lr_scheduler_type") == cfg.lr_scheduler_type == "constant":
        allowed |= {"max_steps", "max_generations"}  # (a decaying schedule is a function of max_steps)
    changed = [
        f"{f.name} {before[f.name]!r} -> {now[f.name]!r}"
        for f in fields(GRPOConfig)
        if f.name in before and f.name not in allowed and before[f.name] != now[f.name]
    ]
    if changed:
        raise ConfigError(
            f"resume_from_checkpoint: {path} was trained with other settings ({'; '.join(changed)}); resume with "
            f"the same values, or start a new run in another --output_dir"
        )


# ------------------------------------------------------------------------------------------------ a run's end


def write_run_end(
    out: Path,
    *,
    finished: bool,
    step: int,
    save_checkpoint: Callable[[], Path],
    model: nn.Module,
    tokenizer,
    summary: dict,
    is_main: bool,
    make_plots: bool,
    make_report: bool,
    signal_name: str,
) -> None:
    """The last checkpoint (every process), then (main process) the end-of-run files of a run that reached its
    last step; a run stopped earlier writes its report and raises KeyboardInterrupt saying how to resume."""
    try:
        save_checkpoint()
        if not finished:
            if make_report and is_main:
                write_report(out, figures=make_plots)
            raise KeyboardInterrupt(
                f"{signal_name}: stopped after step {step}; checkpoint saved in {out}. Resume with the same command "
                "plus --resume_from_checkpoint latest"
            )
        if is_main:
            save_model_files(out / "final", [model, tokenizer])
            if make_plots:
                plot_metrics(out / "metrics.jsonl", out / "plots.png")
            if make_report:
                write_report(out, figures=make_plots)
            write_atomic(out / "summary.json", json.dumps(summary, indent=2))
    except KeyboardInterrupt as e:
        if str(e):
            raise
        wanted = ["final/", *(["plots.png"] if make_plots else []), "report.html", "summary.json"]
        missing = [f for f in wanted if not (out / f.rstrip("/")).exists()]
        raise KeyboardInterrupt(
            f"interrupted during the end-of-run writes: {', '.join(missing) or 'nothing'} not written; "
            f"{last_checkpoint(out, resume=True)}; `python -m tinygrpo.run.report {out}` writes the report from "
            "the run's logs"
        ) from None


def say_skipped_steps(skipped: int, steps: int, out: Path, say: Callable[[str], None]) -> None:
    """At the end of a run with on_nonfinite=skip: every step skipped is an error (the weights are still the ones the
    run started with: nothing is saved); some skipped are said."""
    if skipped and skipped == steps:
        raise NonFiniteError(
            f"on_nonfinite=skip skipped every one of the {skipped} steps (each had a NaN or infinite loss or "
            f"gradient): the run learned nothing ({last_checkpoint(out, resume=True)})"
        )
    if skipped:
        say(
            f"on_nonfinite=skip: {skipped} of {steps} steps were skipped (a NaN or infinite loss or gradient)"
        )


@dataclass
class TrainerState:
    """The loop's own counters (the components' state is theirs: see GRPOTrainer.checkpoint_parts)."""

    step: int = 0
    total_completions: int = 0  # sampled in every round, over all processes
    nonfinite_skipped: int = 0  # updates skipped for a NaN/inf loss or gradient (on_nonfinite="skip")
    nonfinite_steps: int = (
        0  # steps that made no update, every one of theirs being NaN/inf (on_nonfinite="skip")
    )
    elapsed_seconds: float = 0.0  # wall-clock seconds in training steps (evaluation and checkpoints excluded)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
