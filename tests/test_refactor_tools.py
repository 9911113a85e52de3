"""The two tools a refactor is checked with: benchmarks/same_runs.py (fingerprints of short runs, compared) and
benchmarks/step_calls.py (the functions and files one plain step calls)."""

from __future__ import annotations

import json

import pytest

from benchmarks import same_runs, step_calls


def _fingerprints(tmp_path, name: str, runs: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"runs": runs}))
    return str(path)


def test_same_runs_compares_metrics_completions_and_weights(tmp_path, capsys):
    run = {
        "argv": ["train_grpo.py", "--max_steps", "2"],
        "metrics": [{"step": 1, "loss": 0.5, "reward": 0.25}],
        "completions_sha256": "ab12",
        "completions_rows": 16,
        "tensors": {"wte": "cd34", "wpe": "ef56"},
    }
    a = _fingerprints(tmp_path, "a.json", {"default": run})
    assert same_runs.main(["--compare", a, a]) == 0
    assert "default: SAME" in capsys.readouterr().out
    for field, changed in (
        ("metrics", [{"step": 1, "loss": 0.5000001, "reward": 0.25}]),
        ("completions_sha256", "ab13"),
        ("tensors", {"wte": "cd34", "wpe": "ef57"}),
    ):
        b = _fingerprints(tmp_path, "b.json", {"default": {**run, field: changed}})
        assert same_runs.main(["--compare", a, b]) == 1
        said = capsys.readouterr().out
        assert "default: SAME" not in said and "1 different" in said, said
    b = _fingerprints(tmp_path, "b.json", {"default": run, "cispo": run})
    assert same_runs.main(["--compare", a, b]) == 1
    assert "cispo: only in" in capsys.readouterr().out


def test_same_runs_leaves_out_timings_only():
    row = {"step": 3, "loss": 0.1, "time/step": 0.2, "throughput/tokens_per_s": 9.0, "time/elapsed": 1.0}
    assert same_runs.untimed(row) == {"step": 3, "loss": 0.1}


@pytest.mark.slow
def test_step_calls_counts_a_plain_step_within_the_libraries_budget(seed_reference, tmp_path, capsys):
    """Three plain steps profiled (benchmarks/step_calls.py): what the plain path calls stays within what the issue
    that made it lighter measured (at most 24 files, 120 functions besides comprehensions' frames; beta read in at
    most 5 files), so that a change that adds a layer to every step says so here."""
    out = tmp_path / "calls.json"
    assert step_calls.main(["--model", seed_reference, "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert 0 < got["files"] <= 24 and 0 < got["functions"] - got["comprehensions"] <= 120, got[
        "by_file"
    ].keys()
    assert "tinygrpo/run/trainer.py" in got["by_file"] and "tinygrpo/rollout/generation.py" in got["by_file"]
    assert got["beta_files"] <= 5, got["beta_file_list"]
