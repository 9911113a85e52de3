"""`python -m studies.compare --quick`: every output exists, comparison.md says what results.json says, the
format-only reference is near chance, and the tabular rows match `tinygrpo.bandit.run_demo` recomputed here."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from studies.compare import cli, settings
from tinygrpo import bandit

pytestmark = pytest.mark.slow  # ~20-40 s: trains 4 tiny references and 8 short token-level runs

OUTPUTS = (
    "comparison.md",
    "results.json",
    "accuracy_vs_completions.png",
    "skipped_fraction.png",
    "beliefs.png",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    cli.main(["--quick", "--output-dir", str(out)])
    return out, json.loads((out / "results.json").read_text()), (out / "comparison.md").read_text()


def _main_table(md: str) -> dict[str, list[str]]:
    """label -> cells of the first Markdown table (the per-method comparison)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _check_cell(cell: str, ms: dict, digits: int) -> None:
    """A "mean ± std" cell (or "not reached") against the numbers in results.json, to the printed precision."""
    if ms.get("n", 1) == 0:
        assert cell == "not reached"
        return
    m = re.fullmatch(r"(-?[\d.]+) ± ([\d.]+)(?: \((\d+)/(\d+) seeds\))?", cell)
    assert m, cell
    tol = 0.5 * 10**-digits + 1e-9
    assert abs(float(m.group(1)) - ms["mean"]) <= tol
    assert abs(float(m.group(2)) - ms["std"]) <= tol
    if "seeds" in ms:
        reached = int(m.group(3)) if m.group(3) else ms["seeds"]
        assert reached == ms["n"]


def test_every_output_exists(quick_run):
    out, _, _ = quick_run
    for name in OUTPUTS:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name


def test_markdown_table_matches_results(quick_run):
    _, res, md = quick_run
    rows = _main_table(md)
    assert list(rows) == [label for (_, _, _, label) in settings.METHODS.values()]  # one row per method
    for method, (_, _, _, label) in settings.METHODS.items():
        s = res["methods"][method]["summary"]
        start, final, r90, r100, zero_var = rows[label]
        _check_cell(start, s["start_acc"], 3)
        _check_cell(final, s["final_acc"], 3)
        _check_cell(r90, s["reach_90"], 0)
        _check_cell(r100, s["reach_100"], 0)
        _check_cell(zero_var, s["final_zero_var_frac"], 3)
        for run in res["methods"][method]["runs"]:  # the same budget for every method
            assert run["x"][-1] == res["settings"]["budget"]
    add = res["addition"]
    assert f"| {add['acc_reference']:.3f} |" in md and f"| {add['acc_after_grpo']:.3f} |" in md
    assert "no row for an unseen question" in md
    assert add["test_problems"] == 500


def test_format_only_reference_is_near_chance(quick_run):
    _, res, _ = quick_run
    assert len(res["references"]) == res["settings"]["seeds"] == 2
    for ref in res["references"].values():
        fmt = ref["format_only"]
        assert fmt["acc"] <= 7 / 36  # chance is 1/13 ~ 2.8 of 36; a real learner of sums would be far above
        assert fmt["well_formed"] >= 0.9  # it does emit "<number><eos>"
        assert ref["imperfect"]["acc"] > fmt["acc"]


def test_table_rows_equal_run_demo(quick_run):
    """Recompute the tabular rows straight from tinygrpo.bandit.run_demo (an independent path)."""
    _, res, _ = quick_run
    steps = res["settings"]["table_steps"]
    assert steps * bandit.DEMO_GROUP == res["settings"]["budget"]
    for kind in ("reinforce", "grpo"):
        entry = res["methods"][f"table_{kind}"]
        seeds = entry["seeds"]
        assert seeds == [bandit.DEMO_SEEDS[kind] + i for i in range(res["settings"]["seeds"])]
        finals, zero_var, reach = [], [], {90: [], 100: []}
        for seed, run in zip(seeds, entry["runs"], strict=True):
            h = bandit.run_demo(kind, seed, steps)
            assert run["acc"][1:] == h["acc"]
            finals.append(h["final_acc"])
            zv = [m in (0.0, 1.0) for m in h["mean_reward"]]
            zero_var.append(sum(zv) / steps)
            if kind == "grpo":  # for GRPO a zero-variance group is exactly a skipped update
                assert zv == h["skipped"]
            for t in reach:
                hit = next((s for s, a in enumerate(h["acc"]) if a >= t / 100), None)
                reach[t].append(None if hit is None else bandit.DEMO_GROUP * (hit + 1))
        s = entry["summary"]
        ddof = 1 if len(seeds) > 1 else 0
        assert s["final_acc"]["mean"] == pytest.approx(np.mean(finals))
        assert s["final_acc"]["std"] == pytest.approx(np.std(finals, ddof=ddof))
        assert s["final_zero_var_frac"]["mean"] == pytest.approx(np.mean(zero_var))
        for t, hits in reach.items():
            assert s[f"reach_{t}"]["per_seed"] == hits
