"""Crash-safe checkpoints: written under a temporary name, moved into place only when complete.

A checkpoint directory `checkpoint-<step>` holds what `accelerator.save_state` writes (model weights as
safetensors, optimizer, per-process RNG states; loaded back with `weights_only=True`), the reference
model when it is being synced, and `trainer_state.json` (step, data cursor, the learning-rate scheduler's state;
each process's sampling generator in sampler_<rank>.json).
A kill at any moment leaves either no `checkpoint-<step>` or a complete one: the directory is renamed into place
after everything in it is written and flushed, and `latest` only ever considers complete ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import torch

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in out.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found) if (p / STATE_FILE).is_file()]


def resolve_checkpoint(spec: str, output_dir: str | Path) -> Path:
    """'latest' -> the newest complete checkpoint in output_dir; otherwise the given directory, checked."""
    if spec == "latest":
        found = checkpoint_dirs(output_dir)
        if not found:
            raise FileNotFoundError(f"resume_from_checkpoint=latest: no complete checkpoint in {output_dir}")
        return found[-1]
    path = Path(spec)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(
            f"resume_from_checkpoint={spec}: not a checkpoint directory (no {STATE_FILE})"
        )
    return path


def fsync_tree(path: Path) -> None:
    """Flush every file under path to disk, so that the rename that publishes it comes after the data."""
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def generator_state_to_list(gen: torch.Generator) -> list[int]:
    return gen.get_state().tolist()


def generator_state_from_list(gen: torch.Generator, state: list[int]) -> None:
    gen.set_state(torch.tensor(state, dtype=torch.uint8))


def write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def publish(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written checkpoint into place (an existing one of the same step is replaced)."""
    fsync_tree(tmp_dir)
    if final_dir.exists():
        old = final_dir.with_name(final_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
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
