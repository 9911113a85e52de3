"""Benchmarks that cannot rot: every script in benchmarks/ runs end to end at its smallest setting, on the CPU, as a
user runs it (its main with a command line, or the script itself), writing into tmp_path only. Together with
tests/test_benchmarks.py (phases.py, limit.py, vs_trl.py --model_name_or_path, time_to_accuracy.py --peer trl) every
script has one. The comparisons print where each peer ran (`device: ours cpu, trl cpu`), and these tests read that
line: a comparison is like for like only when every peer ran on one device."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _bench(name: str):
    """A benchmark script as a module (benchmarks.NAME: its main takes the command line a user types)."""
    return importlib.import_module(f"benchmarks.{name}")


def _need_trl() -> None:
    # CI installs .[test]: there a missing trl fails, it never skips
    importlib.import_module("trl") if os.environ.get("CI") else pytest.importorskip("trl")


def _duration(x: object) -> bool:
    """A measured time has the form of one (a finite float >= 0); its size depends on the machine's load."""
    return isinstance(x, int | float) and math.isfinite(x) and x >= 0


def printed_devices(text: str) -> list[dict[str, str]]:
    """Every `device: PEER DEVICE, PEER DEVICE, ...` line a script printed, each as {peer: device}."""
    return [
        dict(item.split(" ", 1) for item in line.split(", "))
        for line in re.findall(r"^device: (.+)$", text, re.M)
    ]


def _one_device(devices: dict[str, str]) -> str:
    """The device every peer of one printed line ran on (the test fails if they differ)."""
    assert len(set(devices.values())) == 1, f"the peers ran on different devices: {devices}"
    return next(iter(devices.values()))


def test_time_to_accuracy_prints_one_device_for_every_peer(capsys):
    """The settings printed before any run name each peer's device, and every peer gets the same one (the one
    train_grpo.py takes); the line agrees with the settings table's device row."""
    tta = _bench("time_to_accuracy")
    tta.main(["--dry_run", "--peer", "trl,plain,default", "--max_steps", "1"])
    out = capsys.readouterr().out
    (devices,) = printed_devices(out)
    assert list(devices) == ["trl", "ours_plain", "ours_default"]
    device = _one_device(devices)
    assert f"| device | {device} | {device} | {device} |" in out


@pytest.mark.slow
def test_cost_curves_measures_one_point_of_each_trainer_on_one_device(tmp_path, capsys):
    """--sweeps length --max_points 1: one point, ours and TRL's each in a fresh process, the random function built
    in tmp_path; both measured (a trainer that fails leaves n/a and the script goes on: the test would see it), on
    one device, and the results file drawn into the report."""
    _need_trl()
    cc = _bench("cost_curves")
    argv = "--sweeps length --max_points 1 --warmup 0 --min_seconds 0.01 --trl_steps 1 --bench_dir"
    results = cc.main([*argv.split(), str(tmp_path / "bench"), "--json", str(tmp_path / "cc.json")])
    out = capsys.readouterr().out
    (point,) = results["sweeps"]["length"]
    assert point["point"]["max_completion_length"] == cc.SWEEPS["length"][0].max_completion_length
    for trainer in ("ours", "trl"):
        assert point[trainer] is not None, f"{trainer} failed"
        assert _duration(point[trainer]["step_ms"]) and point[trainer]["step_ms"] > 0
    assert _duration(point["trl_over_ours"])
    (devices,) = printed_devices(out)
    assert list(devices) == ["ours", "trl"] and _one_device(devices) == point["ours"]["device"]
    (saved,) = json.loads((tmp_path / "cc.json").read_text())["sweeps"]["length"]
    assert (
        saved["ours"]["step_ms"] == point["ours"]["step_ms"]
        and saved["trl"]["step_ms"] == point["trl"]["step_ms"]
    )
    assert "#### Completion length" in out and (tmp_path / "bench").is_dir()


@pytest.mark.slow
def test_group_memory_measures_a_point_in_a_fresh_process(tmp_path, capsys):
    """One G, one completion length, one layout (each point is a process of its own, seconds of imports): the
    point measured (not failed), printed, written to --results and drawn into the docs' table from that file."""
    gm = _bench("group_memory")
    results_file = tmp_path / "group_memory.json"
    argv = "--G 2 --prompts 1 --completion_length 2 --reps 1 --layouts group --results"
    assert gm.main([*argv.split(), str(results_file)]) == 0
    results = json.loads(results_file.read_text())
    (point,) = results["points"]
    assert (point["layout"], point["G"], point["Tc"]) == ("group", 2, 2) and "error" not in point
    assert _duration(point["ms"]) and point["peak_added_mib"] >= 0
    out = capsys.readouterr().out
    assert re.search(r"^\| 2 \| \d+ \| \d+ / \d+ \|$", out, re.M), out  # G 2's row: MiB / ms, not "failed"
    assert re.search(r"^\| 2 \| \d+ \| [\d,]+ MiB / [\d,]+ ms \|$", gm.layouts_table(results), re.M)


@pytest.mark.slow
def test_processes_runs_one_two_and_two_independent_processes(seed_reference, tmp_path, capsys):
    """train_grpo.py on 1 process, on 2 (DDP, accelerate launch) and as 2 independent half-batch runs, 2 steps each
    from the session's small reference: every run's medians in --results, and the docs' table drawn from them."""
    proc = _bench("processes")
    results_file = tmp_path / "processes.json"
    argv = "--prompts 2 --steps 2 --skip 1 --reps 1 --model_name_or_path"
    med = proc.main([*argv.split(), seed_reference, "--results", str(results_file)])
    assert list(med) == [proc.ONE, proc.DDP, proc.APART]
    results = json.loads(results_file.read_text())
    assert [r["run"] for r in results["rows"]] == [proc.ONE, proc.DDP, proc.APART]
    assert all(_duration(r["step_ms"]) and r["step_ms"] > 0 for r in results["rows"])
    assert all(r["speedup"].keys() == {"step", "generate", "update"} for r in results["rows"][1:])
    assert results["measurement"]["prompts"] == 2 and results["measurement"]["steps"] == 2
    out = capsys.readouterr().out
    assert "| 1 process |" in out and "| 2 processes (DDP) |" in out
    assert "| 2 independent processes at once, half the batch each |" in proc.table(results)


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
    assert [s.split()[1] for s in steps] == ["device", "1.", "2.", "3.", "4.", "done:"]
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
    # every results file this run wrote is under OUT (none in docs/results)
    wrote = re.findall(r"^wrote (\S+?);", log, re.M)
    assert len(wrote) == 2 and all(Path(w).resolve().is_relative_to(out.resolve()) for w in wrote)
    # where the peers ran: vs_trl.py's line, then time_to_accuracy.py's, every peer on the CPU (--cpu)
    printed = printed_devices(log)
    assert [list(d) for d in printed] == [["ours", "trl"], ["trl", "ours_default"]]
    assert all(_one_device(d) == "cpu" for d in printed)
