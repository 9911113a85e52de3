"""studies.turns without training: how transcripts are scored, and the tables drawn from a results file."""

from __future__ import annotations

import pytest

from studies import turns
from tinygrpo.data.tasks.guess_number import MAX_TURNS


def test_transcripts_are_scored_by_their_guesses_and_a_failure_counts_the_cap():
    texts = [
        "32?<16?=<eos>",  # found in 2
        "32?=<eos>",  # found in 1
        "".join(f"{g}?<" for g in range(1, 13)) + "<eos>",  # never found: the cap
        "07?!7?=<eos>",  # a malformed guess is a turn
        "",  # nothing written
    ]
    s = turns.scored(texts, [16, 32, 0, 7, 5])
    assert s["success"] == pytest.approx(3 / 5)
    assert s["mean_turns"] == pytest.approx((2 + 1 + MAX_TURNS + 2 + MAX_TURNS) / 5)
    assert s["first_guesses"] == {"32": 2, "1": 1, "07": 1, "none": 1}


def _policy(success: float, mean: float, first: dict) -> dict:
    s = {"episodes": 100, "success": success, "mean_turns": mean, "max_turns": 9, "first_guesses": first}
    tokens = [["3", "policy", 0.5], ["2", "policy", 0.25], ["?", "policy", 1.0], ["=", "environment", 0.0]]
    example = {"target": 32, "sampled": "32?=<eos>", "greedy": "32?=<eos>", "tokens": tokens}
    return {"sampled": s, "greedy": s, "greedy_exact": s, "example": example}


RESULTS = {
    "split": "test",
    "numbers": 64,
    "max_turns": 12,
    "optimal_expected_turns": 5.125,
    "weak_expected_turns": 6.636,
    "policies": [{"policy": "reference", "env": "guess_number", **_policy(0.97, 6.7, {"44": 30, "9": 70})}],
    "runs": [
        {"arm": "env", "seed": 42, **_policy(1.0, 5.4, {"31": 90, "22": 10})},
        {"arm": "env", "seed": 1, **_policy(0.995, 5.7, {"32": 100})},
        {"arm": "blind", "seed": 42, **_policy(0.15, 11.0, {"1": 100})},
    ],
    "minutes": 22.5,
}


def test_the_tables_show_every_policy_and_the_goals_against_the_exact_limits():
    t = turns.table(RESULTS)
    assert "| GRPO env, seed 42 | 100.0 % | 5.40 |" in t and "| GRPO blind, seed 42 | 15.0 % | 11.00 |" in t
    assert "Binary search, exactly: 5.125 turns (within 10 %: 5.638)" in t
    s = turns.summary(RESULTS)
    assert "+5.4 % / +11.2 %" in s and "not met" in s  # (seed 1 is 11.2 % over: the goal fails on it)
    assert "22.5 minutes" in s
    f = turns.first_guesses(RESULTS)
    assert "| GRPO env, seed 42 | 90.0 % | 31 (90 %), 22 (10 %) |" in f
    e = turns.episode(RESULTS)
    assert "| `3` | `2` | `?` | *=* |" in e and "| 0.50 | 0.25 | 1.00 |  |" in e
    assert "after (GRPO, seed 42)" in e


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_binary_search_played_out_takes_the_optimums_turns(n):
    from tinygrpo.data.tasks.guess_number import optimal_expected_turns

    played = turns.binary_search_turns(n)
    assert sum(played) / n == pytest.approx(optimal_expected_turns(n), rel=1e-12)


def test_departures_count_each_number_by_its_turns():
    r = {
        **RESULTS,
        "policies": [{**RESULTS["policies"][0], "exact_turns": [1, 2, 2, None] + [3] * 60}],
        "runs": [],
    }
    table = turns.departures(r)
    line = next(x for x in table.splitlines() if x.startswith("| reference"))
    assert (
        line == "| reference | 1 | 2 | 60 |  |  |  |  |  |  |  |  |  | 1: 3 | 3.078 |"
    )  # (number 3 not found: the cap, 12)
    assert table.splitlines()[2].startswith("| binary search | 1 | 2 | 4 | 8 | 16 | 32 | 1 |")


def test_the_recipe_table_names_each_candidate():
    r = {
        "recipes": [
            {"recipe": "a", "what": "the first", "fits": True, **_policy(1.0, 5.5, {"22": 1})},
            {
                "recipe": "b",
                "what": "the second",
                "fits": True,
                **_policy(0.98, 5.2, {"22": 1}),
            },  # (below 99 %)
            {"recipe": "c", "what": "too slow", "fits": False, **_policy(1.0, 5.1, {"22": 1})},
        ]
    }
    text = turns.recipes_table(r)
    assert text.splitlines()[2].startswith("| `a`: the first | 100.0 % | 5.50 |")
    assert text.endswith("fits 30 minutes): `a`.")


def test_summarize_trains_nothing_and_says_so_when_the_reference_is_missing(tmp_path, monkeypatch, capsys):
    """`--summarize` (its help: train nothing) with no reference to measure stops with one error line naming where
    the reference would be and how to train it, and starts no training (no subprocess, nothing written)."""
    import subprocess

    missing = tmp_path / "checkpoints" / "guess_number"
    monkeypatch.setattr(turns, "reference_of", lambda name: ("guess_number", missing))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"started {a}"))
    with pytest.raises(SystemExit) as stop:
        turns.main(["--summarize", "--out", str(tmp_path / "runs")])
    assert str(stop.value).startswith(
        f"error: no reference at {missing} to measure: --summarize trains nothing"
    )
    assert "python train_sft.py --task guess_number" in str(stop.value)
    assert not missing.exists() and not (tmp_path / "runs").exists()
