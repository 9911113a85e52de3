"""The variants sweep: its numbers and table from synthetic runs, its one-line errors, and one tiny real sweep (a run
that trains, a run that fails at start, a variant train_grpo.py rejects) on the seed reference."""

from __future__ import annotations

import json
import shlex
import statistics
from pathlib import Path

import pytest

from studies import _runs, sweep
from studies import results as results_module
from tinygrpo.run.config import parse_config
from tinygrpo.run.logs import read_jsonl

# ================================================================================================ synthetic runs


def _run_dir(root: Path, name: str, curve: list[tuple[int, float, int, float]]) -> Path:
    """A run directory whose metrics.jsonl has the trainer's shape: one JSON object per logged step, the evaluation
    keys merged into that step's line, training-only lines in between."""
    d = root / name
    d.mkdir(parents=True)
    lines = []
    for step, seconds, completions, acc in curve:
        step *= sweep.UPDATES  # (a study step is a generation; metrics.jsonl counts optimizer steps)
        row = {"step": step, "time/elapsed": seconds, "num_completions": completions, "eval/accuracy": acc}
        row["eval/accuracy/carry"] = acc / 2
        if step:
            row |= {"reward": acc, "frac_completions_with_signal": 0.3, "frac_reward_zero_std": 0.5}
            lines.append({"step": step - 1, "reward": 0.5, "num_completions": completions - 10})
        lines.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    return d


# three seeds of "grpo": two reach 90 % (at 20 s / 2,000 and 30 s / 3,000 completions), one reaches only 85 %; none 95 %
CURVES = {
    1: [(0, 0.0, 0, 0.6), (10, 10.0, 1000, 0.8), (20, 20.0, 2000, 0.91), (30, 30.0, 3000, 0.92)],
    2: [(0, 0.0, 0, 0.6), (10, 10.0, 1100, 0.7), (20, 20.0, 2100, 0.85), (30, 30.0, 3000, 0.93)],
    3: [(0, 0.0, 0, 0.6), (10, 10.0, 900, 0.7), (20, 20.0, 1900, 0.8), (30, 30.0, 2900, 0.85)],
}
# two seeds of "rloo": both reach 90 % and 95 %
CURVES_RLOO = {
    1: [(0, 0.0, 0, 0.6), (10, 11.0, 1_000_000, 0.95), (20, 21.0, 2_000_000, 0.97)],
    2: [(0, 0.0, 0, 0.6), (10, 12.0, 1_200_000, 0.92), (20, 23.0, 2_400_000, 0.96)],
}


@pytest.fixture
def results(tmp_path) -> dict[str, list[dict]]:
    tests = {1: 0.9, 2: 0.8, 3: 0.7}
    out = {"grpo": [], "rloo": []}
    for seed, curve in CURVES.items():
        d = _run_dir(tmp_path, f"grpo-seed{seed}", curve)
        out["grpo"].append(sweep.collect_run(d, seed, test_fn=lambda _d, s=seed: tests[s]))
    for seed, curve in CURVES_RLOO.items():
        d = _run_dir(tmp_path, f"rloo-seed{seed}", curve)
        out["rloo"].append(sweep.collect_run(d, seed, test_fn=lambda _d: 0.95))
    return out


def test_a_run_is_read_as_its_evaluation_curve(results):
    assert results["grpo"][0] == {"seed": 1, "eval": [list(r) for r in CURVES[1]], "test": 0.9}


def test_summary_keeps_per_seed_numbers_and_first_crossings(results):
    rows = {r["variant"]: r for r in sweep.summarise(results)}
    g = rows["grpo"]
    assert g["seeds"] == [1, 2, 3] and g["flags"] == ["--loss_type", "grpo"]
    assert g["val_final"] == [0.92, 0.93, 0.85] and g["test_final"] == [0.9, 0.8, 0.7]
    assert g["s_to_90"] == [20.0, 30.0] and g["n_to_90"] == [2000, 3000]  # seed 3 never got there
    assert g["s_to_95"] == [] and g["n_to_95"] == []
    r = rows["rloo"]
    assert r["s_to_90"] == [11.0, 12.0] and r["n_to_95"] == [1_000_000, 2_400_000]


def test_mean_std_is_the_sample_std_and_one_value_has_none():
    assert _runs.mean_std([0.9, 0.8, 0.7], "{:.1f}", 100, " %") == "80.0 ± 10.0 %"
    assert _runs.mean_std([1.5e6], "{:.2f}", 1e-6, " M") == "1.50 M"
    assert _runs.mean_std([]) == "-"


def _data(results: dict[str, list[dict]], failed: list[dict] | None = None) -> dict:
    """What the study's main collects from its runs, for these synthetic ones."""
    return {
        "command": "python -m studies.sweep --variants grpo rloo",
        "model": "checkpoints/reference",
        "base_flags": sweep.BASE_FLAGS,
        "extra": [],
        "max_steps": 30,
        "eval_steps": 10,
        "seeds": [1, 2, 3],
        "jobs": 2,
        "threads": _runs.THREADS,
        "rows": sweep.summarise(results),
        "runs": results,
        "failed": failed or [],
    }


def _cells(text: str, variant: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {variant} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_results_hold_mean_and_std_and_only_thresholds_every_seed_reached(results):
    res = json.loads(
        json.dumps(sweep.summarize(_data(results)))
    )  # (as read back from docs/results/sweep.json)
    assert res["measurement"]["command"] == "python -m studies.sweep --variants grpo rloo"
    assert res["measurement"]["machine"]["cpu"] and res["measurement"]["jobs"] == 2
    assert res["reference_validation"] == pytest.approx(0.6)  # every run's step-0 evaluation
    g, r = res["variants"]
    assert g["variant"] == "grpo" and g["seeds"] == 3
    assert g["validation"] == pytest.approx(
        {"mean": statistics.mean([0.92, 0.93, 0.85]), "std": statistics.stdev([0.92, 0.93, 0.85])}
    )
    assert g["to_90"] == {"reached": 2, "seconds": None, "completions": None}  # 2 of 3 seeds: no mean
    assert r["to_95"]["reached"] == 2 and r["to_95"]["seconds"] == pytest.approx(
        {"mean": 17.0, "std": 8.48528137}
    )


def test_table_shows_mean_std_or_how_many_seeds_reached(results):
    res = json.loads(json.dumps(sweep.summarize(_data(results))))
    text = sweep.table(res)
    assert text.startswith("| variant | what | validation, final | test, final | seconds to 90 %")
    cells = _cells(text, "grpo")
    mean, std = statistics.mean([92, 93, 85]), statistics.stdev([92, 93, 85])
    assert (
        cells[2] == f"{mean:.1f} ± {std:.1f} %"
    )  # 90.0 ± 4.4 %: the mean, not the median (92) or the last (85)
    assert cells[3] == "80.0 ± 10.0 %"
    assert cells[4:] == ["n/a (2/3 reached)", "n/a (2/3 reached)", "n/a (0/3 reached)", "n/a (0/3 reached)"]
    # 90 %: 11 and 12 s, 1.0 and 1.2 M; 95 %: 11 and 23 s, 1.0 and 2.4 M (the first evaluation at or above, not the
    # last)
    assert _cells(text, "rloo")[4:] == ["12 ± 1 s", "1.10 ± 0.14 M", "17 ± 8 s", "1.70 ± 0.99 M"]
    short = sweep.headline(res)
    assert short.startswith("| variant | test, final | validation, final | completions / seconds to 90 % |")
    assert _cells(short, "grpo")[3:] == ["n/a (2 of 3 seeds reached it)", "n/a (0 of 3 seeds reached it)"]
    assert _cells(short, "rloo")[3:] == ["1.10 ± 0.14 M / 12 ± 1 s", "1.70 ± 0.99 M / 17 ± 8 s"]


def test_one_seed_has_no_std(results):
    res = sweep.summarize(_data({"rloo": results["rloo"][:1]}))
    assert _cells(sweep.table(res), "rloo")[2:] == ["97.0 %", "95.0 %", "11 s", "1.00 M", "11 s", "1.00 M"]


def test_docs_name_the_command_flags_and_failures_and_plot_the_mean_curve(results, tmp_path):
    failed = [{"variant": "cispo", "seed": 2, "reason": "exit 1: error: boom (log: x.log)"}]
    data = _data(results, failed)
    res = sweep.summarize(data)
    sweep.write_docs(res, data, tmp_path / "docs")
    text = (tmp_path / "docs" / "sweep.md").read_text()
    assert "`python -m studies.sweep --variants grpo rloo`" in text
    assert f"`{shlex.join(sweep.BASE_FLAGS)}`" in text and "OMP_NUM_THREADS=1" in text
    assert f"on {res['measurement']['machine']['cores']} CPU cores" in text
    assert "The reference: 60.0 % on validation" in text
    assert "- cispo seed 2: exit 1: error: boom" in text
    assert "- **rloo**: `--advantage_mode rloo`" in text
    assert (tmp_path / "docs" / "sweep.png").stat().st_size > 0
    # the page is the study's text between markers naming its results file, which draws it again
    saved = tmp_path / "docs" / "results" / "sweep.json"
    assert results_module.load(saved) == json.loads(json.dumps(res))
    assert f"<!-- results studies.sweep:page {saved} -->" in text
    assert results_module.rendered(text) == text
    # the plotted line: completions and accuracy averaged over seeds at each step
    x, y = sweep.mean_curve(results["rloo"])
    assert x == [0, 1_100_000, 2_200_000] and y == pytest.approx([0.6, 0.935, 0.965])


# ================================================================================================ the command line


def test_registry_shape():
    assert set(sweep.DEFAULT_VARIANTS) <= set(sweep.VARIANTS) and len(sweep.DEFAULT_VARIANTS) >= 8
    assert sweep.VARIANTS["dapo (default)"][0] == []
    # four optimizer steps per generated batch of 512 (TRL's spelling), logged every 5 generations
    assert parse_config(sweep.BASE_FLAGS).updates_per_generation == sweep.UPDATES == 4
    assert parse_config(sweep.BASE_FLAGS).generation_size == 512
    # --extra goes last, so that a user's flag overrides the variant's and the base flags
    flags = sweep.run_flags("cispo", 7, ["--epsilon_high", "3"])
    assert flags == [
        "--max_generations",
        "7",
        *sweep.BASE_FLAGS,
        *sweep.VARIANTS["cispo"][0],
        "--epsilon_high",
        "3",
    ]


def test_unknown_variant_is_a_one_line_error(capsys, tmp_path):
    assert sweep.main(["--variants", "grpo", "ppo2", "--output_dir", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown variant(s) 'ppo2'; known: 'dapo (default)', 'grpo'")
    assert "\n" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max_steps", "0"], "error: --jobs, --max_steps and --eval_steps must be >= 1"),
        (["--extra", "--beta 'x"], "error: --extra"),
        (["--model_name_or_path", "/nonexistent"], "error: no model at /nonexistent"),
    ],
)
def test_bad_settings_are_one_line_errors(argv, message, capsys):
    assert sweep.main(argv) == 1
    assert capsys.readouterr().err.startswith(message)


@pytest.mark.slow
def test_sweep_runs_variants_reports_failures_and_writes_its_table(seed_reference, tmp_path, monkeypatch):
    # Two variants added for the test: one whose flags parse but whose run fails at start (its reference model is
    # missing), one whose flags train_grpo.py rejects (never started). Small batches: 8 groups, 2 per mini-batch.
    monkeypatch.setitem(
        sweep.VARIANTS, "broken", (["--beta", "0.1", "--ref_model_name_or_path", str(tmp_path / "none")], "x")
    )
    monkeypatch.setitem(sweep.VARIANTS, "unknown", (["--loss_type", "nope"], "y"))
    out, docs = tmp_path / "sweep", tmp_path / "docs"
    argv = [
        "--variants",
        "grpo",
        "broken",
        "unknown",
        "--seeds",
        "1",
        "--max_steps",
        "2",
        "--eval_steps",
        "1",
    ]
    argv += ["--model_name_or_path", seed_reference, "--output_dir", str(out), "--docs", str(docs)]
    argv += ["--extra", "--per_device_train_batch_size 64"]
    assert sweep.main(argv) == 1  # the failures make the exit non-zero, after the others ran

    data = json.loads((out / "sweep.json").read_text())
    assert [r["variant"] for r in data["rows"]] == ["grpo"]
    failed = {f["variant"]: f for f in data["failed"]}
    assert set(failed) == {"broken", "unknown"}
    assert failed["broken"]["seed"] == 1 and "error: ref_model_name_or_path=" in failed["broken"]["reason"]
    assert failed["unknown"]["seed"] == "all" and "loss_type='nope'" in failed["unknown"]["reason"]
    assert not (out / "unknown-seed1").exists()

    metrics = read_jsonl(out / "grpo-seed1" / "metrics.jsonl")
    evals = [r for r in metrics if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 4, 8]  # (optimizer steps: 4 a generation)
    row = data["rows"][0]
    assert row["val_final"] == [evals[-1]["eval/accuracy"]] and 0 <= row["test_final"][0] <= 1
    config = json.loads((out / "grpo-seed1" / "config.json").read_text())
    assert config["loss_type"] == "grpo" and config["steps_per_generation"] == 4
    assert config["per_device_train_batch_size"] == 64 and config["dataset_test_split"] == "validation"

    text = (docs / "sweep.md").read_text()
    assert f"| grpo | {sweep.VARIANTS['grpo'][1]} | {row['val_final'][0] * 100:.1f} % |" in text
    assert json.loads((docs / "results" / "sweep.json").read_text())["variants"][0]["variant"] == "grpo"
    assert "- broken seed 1: exit 1: error: ref_model_name_or_path=" in text
    assert (docs / "sweep.png").stat().st_size > 0
