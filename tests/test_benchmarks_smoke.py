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
