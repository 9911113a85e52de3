"""Stopping `python train_sft.py`: Ctrl-C or SIGTERM stops the reference's training, which by default runs in a
child process on the portable kernels, and the child with it: one line, exit code 130, nothing saved, no process
left training. A parent killed outright takes its child with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.kills]


def _training(out: Path) -> list[int]:
    """The processes whose command line names `out` (the script, and its child training there)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(out).encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def _start(out: Path) -> subprocess.Popen:
    """train_sft.py with more steps than it will run, once its child has logged a training step."""
    cmd = [
        sys.executable,
        "train_sft.py",
        "--output_dir",
        str(out),
        "--max_steps",
        "1000000",
        "--logging_steps",
        "5",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("sft step"):
            return proc
    pytest.fail(f"no training step logged: {proc.stderr.read()[-2000:]}")


def _gone(out: Path, bound: float = 120) -> bool:
    """Whether every process training into `out` has ended (a hang guard, many times what it takes)."""
    end = time.monotonic() + bound
    while _training(out) and time.monotonic() < end:
        time.sleep(0.2)
    return not _training(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_train_sft_stops_its_child_and_saves_nothing(tmp_path, sig):
    out = tmp_path / "reference"
    proc = _start(out)
    assert len(_training(out)) == 2  # (the script and its child on the portable kernels)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    said = [line for line in stderr.splitlines() if line.strip()]
    assert proc.returncode == 130
    assert said[-1] == f"{sig.name}: the reference's training stopped; nothing saved in {out}"
    assert "Traceback" not in stderr
    assert _gone(out), "the child trained on"
    assert not (out / "config.json").exists()


def test_a_killed_train_sft_takes_its_child_with_it(tmp_path):
    out = tmp_path / "reference"
    proc = _start(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert _gone(out), "the child trained on as an orphan"
    assert not (out / "config.json").exists()
