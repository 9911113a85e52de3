"""benchmarks/gpu.sh --cpu end to end (a file of its own: the longest smoke test, run beside the others by the
second test process). The helpers are tests/test_benchmarks_smoke.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_benchmarks_smoke import ROOT, _need_trl, _one_device, printed_devices


@pytest.mark.slow
def test_gpu_sh_on_the_cpu_runs_every_step(seed_reference, tmp_path):
    """`bash benchmarks/gpu.sh --cpu` with OUT in tmp_path: every step runs and leaves its output there (no results
    file elsewhere); vs_trl.py takes its default path (no --model_name_or_path: it SFTs the seed-bank reference in
    OUT/bench); time_to_accuracy.py runs TRL and our default; both print every peer on the CPU."""
    _need_trl()
    out = tmp_path / "gpu"
    # the venv's python first on PATH: the script runs `python`; REFERENCE: steps 2 and 4 start from the session's
    # small reference, not from checkpoints/reference (which a fresh clone would first train for 1000 steps)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, OUT=str(out), REFERENCE=seed_reference, PATH=path)
    # (the timeout only stops a hang: a loaded 2-core machine takes about a minute)
    cmd = ["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--cpu"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    log = (out / "gpu.log").read_text() if (out / "gpu.log").is_file() else proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    steps = [line for line in log.splitlines() if line.startswith("== ")]
    assert [s.split()[1] for s in steps] == [
        "device",
        "1.",
        "1b.",
        "2.",
        "2b.",
        "3.",
        "4.",
        "4b.",
        "5.",
        "done:",
    ]
    # step 1b: both decodes, each shape's completions the same; no CUDA graphs on the CPU
    table = [line for line in log.splitlines() if re.match(r"\| \d+ x \d+, \d+ \|", line)]
    assert len(table) == 1, table  # (--quick: one shape)
    cells = [c.strip() for c in table[0].strip().strip("|").split("|")]
    assert cells[6] == "yes" and cells[7:9] == ["-", "-"], cells
    summary = json.loads((out / "default" / "summary.json").read_text())  # step 2: the default experiment
    assert summary["steps"] > 0 and "eval_after" in summary
    # step 3: vs_trl.py trained its seed-bank reference itself, in OUT/bench, and measured both starting points
    assert "trained the benchmark reference on the seed bank" in log
    assert list((out / "bench").glob("seed_reference*/config.json"))
    rows = json.loads((out / "vs_trl_results.json").read_text())["rows"]
    assert sorted(r["init"] for r in rows) == ["random", "reference"]
    assert {r["device"] for r in rows} == {"cpu"}
    # step 4: time_to_accuracy.py, TRL and our default, seed 42, each evaluated more than once
    peers = json.loads((out / "time_to_accuracy_results.json").read_text())["peers"]
    assert [(p["peer"], p["seeds"]) for p in peers] == [("trl", [42]), ("ours_default", [42])]
    runs = json.loads((out / "time_to_accuracy" / "time_to_accuracy.json").read_text())["runs"]
    assert all(len(r["points"]) > 1 for r in runs)
    # step 5: the goals read from step 4's results (4b, the CUDA graphs, is skipped on the CPU)
    goals = json.loads((out / "goals.json").read_text())
    assert list(goals["runs"]) == ["default"] and goals["runs"]["default"]["seeds"] == 1
    assert goals["runs"]["default"]["figures"]["1000 steps s"] == peers[1]["runs"][0]["train_s"] > 0
    assert "| default | 1 |" in log and "The step split" in log
    # every results file this run wrote is under OUT (none in docs/results)
    wrote = re.findall(r"^wrote (\S+?);", log, re.M)
    assert len(wrote) == 3 and all(Path(w).resolve().is_relative_to(out.resolve()) for w in wrote)
    # where the peers ran: vs_trl.py's line, then time_to_accuracy.py's, every peer on the CPU (--cpu)
    printed = printed_devices(log)
    assert [list(d) for d in printed] == [["ours", "trl"], ["trl", "ours_default"]]
    assert all(_one_device(d) == "cpu" for d in printed)


def _fake_python(tmp_path: Path) -> Path:
    """A stand-in `python` that fails (exit 3) where its arguments or its script contain $FAIL_ON, else says how it
    was called and exits 0."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'script=""; [[ "${1:-}" == - ]] && script=$(cat)\n'
        '[[ -n ${FAIL_ON:-} && "$* $script" == *"$FAIL_ON"* ]] && exit 3\n'
        'echo "python $*"\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    return fake.parent


def test_gpu_sh_runs_the_steps_it_is_asked_for(tmp_path):
    """STEPS=4,5: every step's header, the others said skipped; only steps 4 and 5 run a command."""
    path = f"{_fake_python(tmp_path)}{os.pathsep}/usr/bin:/bin"
    env = dict(os.environ, OUT=str(tmp_path / "gpu"), STEPS="4,5", PATH=path)
    cmd = ["bash", str(ROOT / "benchmarks" / "gpu.sh")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    steps = [line.split()[1] for line in log.splitlines() if line.startswith("== ")]
    assert steps == ["device", "1.", "1b.", "2.", "2b.", "3.", "4.", "4b.", "5.", "done:"], log
    assert log.count("(skipped: not in STEPS=4,5)") == 6
    ran = [line.split()[1] for line in log.splitlines() if line.startswith("python ") and ".py" in line]
    assert ran == ["benchmarks/time_to_accuracy.py", "benchmarks/gpu_goals.py"], log


@pytest.mark.parametrize(
    ("fail_on", "want_steps", "want_errors"),
    [
        # a step that fails is said, and the next ones run: one GPU session measures all it can
        ("static_decode.py", ["device", "1.", "1b.", "2.", "2b.", "3.", "4.", "4b.", "5.", "done:"], ["1b"]),
        (
            "--cuda_graphs true",
            ["device", "1.", "1b.", "2.", "2b.", "3.", "4.", "4b.", "5.", "done:"],
            ["4b"],
        ),
        ("gpu_goals.py", ["device", "1.", "1b.", "2.", "2b.", "3.", "4.", "4b.", "5.", "done:"], ["5"]),
        # no GPU: nothing else runs
        ("is_available", ["device"], []),
    ],
)
def test_gpu_sh_says_a_failed_step_and_runs_the_next(tmp_path, fail_on, want_steps, want_errors):
    """Fault injection with a stand-in `python` (_fake_python) that fails where its arguments or its script contain
    `fail_on`: every step's header still prints (the GPU path, as on one), each failure is one error line, and the
    script exits non-zero; a missing GPU stops it at once."""
    bin_dir = _fake_python(tmp_path)
    env = dict(
        os.environ, OUT=str(tmp_path / "gpu"), FAIL_ON=fail_on, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin"
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    steps = [line.split()[1] for line in log.splitlines() if line.startswith("== ")]
    if want_errors:
        want_steps = want_steps[:-1]  # ("done" only when every step passed)
    assert steps == want_steps, log
    said = [line.split()[2] for line in log.splitlines() if line.startswith("error: step ")]
    assert said == want_errors, log
    if want_errors:
        assert f"error: steps {' '.join(want_errors)} failed" in log
