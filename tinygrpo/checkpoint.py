"""Crash-safe checkpoints: written under a temporary name, moved into place only when complete.

A checkpoint directory `checkpoint-<step>` holds what `accelerator.save_state` writes (model weights as
safetensors, optimizer, per-process RNG states; loaded back with `weights_only=True`), the reference
model when it is being synced, `trainer_state.json` (step, data cursor, the learning-rate scheduler's state;
each process's sampling generator in sampler_<rank>.json), the run's settings (`grpo_config.json`) and a manifest
of every file's size and SHA-256 (`manifest.json`), written last.
A kill at any moment leaves either no `checkpoint-<step>` or a complete one: the directory is renamed into place
after everything in it is written and flushed, and `latest` only ever considers complete ones. A checkpoint damaged
later (a truncated or edited file) fails its manifest: `latest` skips it, and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from .config import ConfigError

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "grpo_config.json"
MANIFEST_FILE = "manifest.json"


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in out.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found) if (p / STATE_FILE).is_file()]


def resolve_checkpoint(spec: str, output_dir: str | Path, say: Callable[[str], None] = print) -> Path:
    """'latest' -> the newest complete checkpoint in output_dir that verifies (each one that does not is skipped,
    with a line saying why); otherwise the given directory, which must verify."""
    if spec == "latest":
        found = checkpoint_dirs(output_dir)
        for path in reversed(found):
            problem = verify(path)
            if problem is None:
                return path
            say(f"skipping {path}: {problem}")
        raise ConfigError(
            f"resume_from_checkpoint=latest: no complete checkpoint in {output_dir}"
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
