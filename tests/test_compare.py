"""`python -m studies.compare --quick`: every output exists, comparison.md says what results.json says, the
format-only reference is near chance, and the tabular rows match `tinygrpo.oracles.bandit.run_demo` recomputed here; the
results file (docs/results/comparison.json) from synthetic runs, and the page drawn from it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from studies import results as results_module
from studies.compare import cli, report, settings
from tinygrpo.oracles import bandit

# the quick run: ~20-40 s, it trains 4 tiny references and 8 short token-level runs
slow = pytest.mark.slow

OUTPUTS = (
    "comparison.md",
    "comparison.json",
    "results.json",
    "accuracy_vs_completions.png",
    "skipped_fraction.png",
    "beliefs.png",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    cli.main(["--quick", "--output-dir", str(out), "--docs", str(out / "docs")])
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


@slow
def test_every_output_exists(quick_run):
    out, _, _ = quick_run
    for name in OUTPUTS:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name


@slow
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


@slow
def test_format_only_reference_is_near_chance(quick_run):
    _, res, _ = quick_run
    assert len(res["references"]) == res["settings"]["seeds"] == 2
    for ref in res["references"].values():
        fmt = ref["format_only"]
        assert fmt["acc"] <= 7 / 36  # chance is 1/13 ~ 2.8 of 36; a real learner of sums would be far above
        assert fmt["well_formed"] >= 0.9  # it does emit "<number><eos>"
        assert ref["imperfect"]["acc"] > fmt["acc"]


@slow
def test_table_rows_equal_run_demo(quick_run):
    """Recompute the tabular rows straight from tinygrpo.oracles.bandit.run_demo (an independent path)."""
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


@slow
def test_docs_hold_the_results_file_and_the_page_drawn_from_it(quick_run):
    out, _, md = quick_run
    docs = out / "docs"
    shown = results_module.load(docs / "results" / "comparison.json")
    assert shown == results_module.load(out / "comparison.json") and shown["measurement"]["machine"]["cpu"]
    assert (
        shown["measurement"]["command"]
        == f"python -m studies.compare --quick --output-dir {out} --docs {docs}"
    )
    text = (docs / "comparison.md").read_text()
    assert f"<!-- results studies.compare.report:page {docs / 'results' / 'comparison.json'} -->" in text
    assert results_module.rendered(text) == text  # the page is what its results file draws
    unmarked = "".join(line for line in text.splitlines(keepends=True) if "<!-- " not in line)
    assert unmarked == md  # the same page as in the output directory, markers aside
    for name in OUTPUTS[3:]:
        assert (docs / name).stat().st_size > 0


# ================================================================================================ synthetic runs


def _curve(seed: int, x: list[int], acc: list[float], zero_var: list[float]) -> dict:
    return {"seed": seed, "x": x, "acc": acc, "zero_var_frac": zero_var}


def _full() -> dict:
    """What `run` collects, for synthetic runs: the table methods' three seeds differ so that a mean, a median, the
    first and the last point give different text; GPT seeds reach 90 % on one seed of three."""
    x = [0, 8, 16, 24]
    st = settings.Settings(seeds=3, budget=24, prompts_per_step=1)
    methods = {}
    for method, (family, _, _, _) in settings.METHODS.items():
        if family == "table":
            runs = [
                _curve(0, x, [0.1, 0.5, 0.95, 0.9], [0.0, 1.0, 0.5, 0.3]),
                _curve(1, x, [0.1, 0.92, 0.95, 1.0], [0.0, 0.0, 0.5, 0.4]),
                _curve(2, x, [0.1, 0.2, 0.3, 0.2], [0.0, 1.0, 1.0, 0.8]),
            ]
        else:
            runs = [
                _curve(0, x, [0.2, 0.3, 0.91, 0.5], [0.0, 0.5, 0.5, 0.5]),
                _curve(1, x, [0.3, 0.3, 0.3, 0.4], [0.0, 0.5, 0.5, 0.5]),
                _curve(2, x, [0.4, 0.3, 0.3, 0.3], [0.0, 0.5, 0.5, 0.5]),
            ]
        methods[method] = {"seeds": [0, 1, 2], "runs": runs, "summary": settings.summarize_runs(runs)}
    refs = {
        str(s): {"format_only": {"acc": a, "well_formed": 1.0}, "imperfect": {"acc": 0.3 + a}}
        for s, a in ((42, 0.0), (43, 0.1), (44, 0.5))
    }
    return {
        "settings": {
            **{
                k: getattr(st, k)
                for k in report.SHOWN_SETTINGS
                if k not in ("table_steps", "token_steps", "completions_per_token_step")
            },
            "table_steps": st.table_steps,
            "token_steps": st.token_steps,
            "completions_per_token_step": st.completions_per_token_step,
        },
        "methods": methods,
        "references": refs,
        "addition": {
            "reference": "checkpoints/reference",
            "test_problems": 500,
            "test_unseen_by_grpo": 500,
            "acc_reference": 0.6664,
            "acc_after_grpo": 0.9976,
            "grpo_steps": 1000,
            "grpo_completions": 2_148_272,
            "grpo_settings": {
                "per_device_train_batch_size": 512,
                "num_generations": 8,
                "learning_rate": 0.002,
                "beta": 0.0,
                "loss_type": "dapo",
            },
        },
        "seconds": 155.6,
    }


def _rows(text: str) -> dict[str, list[str]]:
    return {
        cells[0]: cells[1:]
        for line in text.splitlines()[2:]
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }


def test_results_file_from_synthetic_runs_draws_the_tables():
    shown = json.loads(json.dumps(report.summarize(_full(), "python -m studies.compare --seeds 3")))
    assert shown["measurement"]["command"] == "python -m studies.compare --seeds 3"
    assert shown["measurement"]["machine"]["cpu"] and "runs" not in shown["methods"]["table_grpo"]
    rows = _rows(report.table(shown))
    # the LAST point of each seed, averaged (mean 0.700, not the median 0.900 or the best 1.000); the first point
    # at or above 90 % (8 and 16 completions, not the last point's 24), on 2 of the 3 seeds
    assert rows["table GRPO"] == [
        "0.100 ± 0.000",
        "0.700 ± 0.436",
        "12 ± 6 (2/3 seeds)",
        "24 ± 0 (1/3 seeds)",
        "0.500 ± 0.265",
    ]
    assert rows["char GPT GRPO, format-only SFT start"][1:4] == [
        "0.400 ± 0.100",
        "16 ± 0 (1/3 seeds)",
        "not reached",
    ]
    assert rows["char GPT GRPO, format-only SFT start"][0] == "0.300 ± 0.100"  # the first point, not the last
    assert _rows(report.addition_table(shown)) == {
        "SFT reference (`checkpoints/reference`)": ["0.666"],
        "after token-level GRPO (1000 steps, 2,148,272 completions)": ["0.998"],
    }
    text = report.page(shown)
    assert text.startswith("Generated by `python -m studies.compare --seeds 3` (156 s).")
    # the references over seeds: mean ± std (0.200 ± 0.265), not the median (0.100)
    assert "Greedy accuracy 0.200 ± 0.265 (chance 1/13 = 0.077)" in text
    assert "Greedy accuracy 0.500 ± 0.265 on the 36." in text
    # the zero-variance fractions the prose cites are the table's (0.500, 0.500 as 50.0%)
    assert "are 50.0% of the table GRPO's groups and 50.0% of the format-only GPT GRPO's" in text
    assert (
        "On the table: GRPO and REINFORCE end level (0.700 vs 0.700); 90 % is reached on 2 (GRPO) vs 2"
        in text
    )
