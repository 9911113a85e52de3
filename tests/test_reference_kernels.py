"""The default reference does not move with the CPU (SFTConfig.kernels, "portable"): trained from a process on this
CPU's own kernels and from one on the lower kernel path, it is one model, bit for bit, with one held-out accuracy.
Trained on the native kernels instead, the two part within a few steps: what the portable kernels prevent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from studies import reference_kernels

REPO = Path(__file__).resolve().parents[1]
# The lower kernel path of .ci/run's numerics tests: ATen's generic kernels, MKL and oneDNN at SSE.
LOWER = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}

two_paths = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() == "DEFAULT",
    reason="this process already runs the lower kernel path: no second path to compare with",
)


def train_both(tmp_path: Path, *flags: str) -> tuple[Path, Path]:
    """`python train_sft.py FLAGS` from a process on this CPU's kernels and from one on the lower path, side by side."""
    outs = tmp_path / "native", tmp_path / "lower"
    procs = [
        subprocess.Popen(
            [sys.executable, "train_sft.py", "--output_dir", str(out), "--logging_steps", "0", *flags],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1", **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for out, extra in zip(outs, ({}, LOWER), strict=True)
    ]
    for p in procs:
        printed = p.communicate()[0]
        assert p.returncode == 0, printed
    return outs


@pytest.mark.slow
@two_paths
def test_the_default_reference_is_one_model_on_both_kernel_paths(tmp_path):
    # README command 1's reference, its recipe's first 120 of 1000 steps (the suite's time; the whole recipe on both
    # paths: python -m studies.reference_kernels, docs/default.md), held-out accuracy on all 500 test problems
    native, lower = train_both(tmp_path, "--max_steps", "120")
    a, b = load_file(native / "model.safetensors"), load_file(lower / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    sa, sb = (json.loads((d / "sft_summary.json").read_text()) for d in (native, lower))
    assert sa["kernels"] == sb["kernels"] == "portable (DEFAULT)"
    assert sa["eval_accuracy"] == sb["eval_accuracy"] and sa["final_loss"] == sb["final_loss"]


@pytest.mark.slow
@two_paths
def test_on_the_native_kernels_the_two_paths_train_apart(tmp_path):
    """The check above can fail: the same recipe on each process's own kernels gives two models."""
    native, lower = train_both(
        tmp_path, "--kernels", "native", "--max_steps", "30", "--dataset_test_split", ""
    )
    a, b = load_file(native / "model.safetensors"), load_file(lower / "model.safetensors")
    assert not all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((lower / "sft_summary.json").read_text())["kernels"] == "native (DEFAULT)"


def test_the_study_table_says_which_references_share_their_weights():
    """studies/reference_kernels.py: each row against the first of its --kernels, by the weights' bytes."""
    run = {"trained_on": "x", "eval_accuracy": 0.5, "final_loss": 0.1, "train_seconds": 1.0}
    runs = [
        {**run, "kernels": "portable", "started_on": "this CPU's", "sha256": "a"},
        {**run, "kernels": "portable", "started_on": "lower", "sha256": "a"},
        {**run, "kernels": "native", "started_on": "this CPU's", "sha256": "b"},
        {**run, "kernels": "native", "started_on": "lower", "sha256": "c"},
    ]
    machine = {"cpu": "Some CPU", "kernels": "AVX2"}
    text = reference_kernels.table({"measurement": {"machine": machine}, "runs": runs})
    rows = [line for line in text.splitlines() if line.startswith("| `--kernels")]
    assert [r.rsplit("|", 2)[1].strip() for r in rows] == ["-", "the same weights", "-", "other weights"]
    assert "Some CPU, AVX2 kernels" in text
