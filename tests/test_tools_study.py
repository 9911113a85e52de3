"""studies/tools.py: the arms' commands and the table drawn from runs' metrics (fake runs, written here)."""

from __future__ import annotations

import json

import pytest

from studies import tools


def _fake_run(d, start: float, after: float, share: float, seconds: float) -> None:
    d.mkdir(parents=True)
    rows = [
        {"step": 0, "eval/accuracy": start, "eval/format/tool": 0.1, "time/elapsed": 0.0},
        {"step": 10, "reward": 0.5, "time/elapsed": seconds / 2, "tools/call_frequency": 0.4},
        {"step": 20, "reward": 0.9, "time/elapsed": seconds, "tools/call_frequency": 0.9},
        {"step": 20, "eval/accuracy": after, "eval/format/tool": share, "time/elapsed": seconds},
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_table_gives_each_seed_the_median_and_the_tool_share(tmp_path):
    for seed, after in ((42, 0.9), (1, 0.8), (2, 0.95)):
        _fake_run(tools.run_dir(tmp_path, "tool", seed), 0.05, after, 0.97, 120.0 + seed)
    _fake_run(tools.run_dir(tmp_path, "direct", 42), 0.03, 0.04, 0.0, 60.0)
    results = tools.summarize(["tool", "tool_disabled", "direct"], [42, 1, 2], tmp_path, "cmd", "test")
    assert all(r["command"] == "cmd" for r in results["arms"])
    assert [r["arm"] for r in results["arms"]] == ["tool", "direct"]  # (no runs: no row)
    tool = results["arms"][0]
    assert tool["after"] == {"42": 0.9, "1": 0.8, "2": 0.95} and tool["start"] == 0.05
    text = tools.table(results)
    assert (
        "| tool | `multiplication_tool` | 5.0% | 90.0% / 80.0% / 95.0% | 90.0% | 10.0% -> 97.0% | 162 / - / 122 | 20 | 2.0 |"
        in text
    )
    assert "| direct | `multiplication` | 3.0% | 4.0% | 4.0% | 10.0% -> 0.0% | - | 20 | 1.0 |" in text


@pytest.mark.parametrize("arm", list(tools.ARMS))
def test_every_arm_runs_the_recipe_with_its_reference_and_flags(arm, tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(tools, "ensure_reference", lambda task: tools.REPO / "checkpoints" / task)
    monkeypatch.setattr(tools, "run_logged", lambda cmd, d: seen.update(cmd=cmd, d=d) or 0)
    assert tools.grpo(arm, 7, tmp_path, "validation") == 0
    cmd = seen["cmd"]
    assert cmd[cmd.index("--config") + 1] == tools.ARMS[arm][1] and cmd[cmd.index("--seed") + 1] == "7"
    assert cmd[cmd.index("--model_name_or_path") + 1] == f"checkpoints/{tools.ARMS[arm][0]}"
    assert ("--environment" in cmd) == ("disabled" in arm or arm == "direct")
    assert cmd[cmd.index("--dataset_test_split") + 1] == "validation"


def test_the_tools_recipe_screen_chooses_among_the_runs_that_finished():
    """studies.tools' recipe screen: the chosen candidate is the best at its last evaluation among the runs that
    reached their steps (one stopped early, however high, is not chosen and is said stopped), shown in bold."""

    def row(name: str, accuracy: dict[int, float], max_steps: int) -> dict:
        return {
            "recipe": name,
            "what": name,
            "accuracy": {str(k): v for k, v in accuracy.items()},
            "share_after": 0.8,
            "max_steps": max_steps,
            "minutes": 10.0,
        }

    screen = {
        "recipes": [
            row("a", {0: 0.05, 25: 0.2, 300: 0.30}, 300),
            row("b", {0: 0.05, 25: 0.9}, 300),  # stopped after step 25
            row("c", {0: 0.05, 300: 0.28, 500: 0.33}, 500),
        ]
    }
    assert tools.chosen_recipe(screen) == "c"
    lines = tools.recipe_table(screen).splitlines()
    assert "| 90.0% at step 25, stopped |" in lines[3] and "**" not in lines[3]
    assert "| **33.0%** |" in lines[4] and "**`c`" in lines[4] and "**" not in lines[2]
    screen["recipes"][0]["accuracy"]["300"] = 0.34  # (the best at the end now)
    assert tools.chosen_recipe(screen) == "a"


def test_the_recipe_screen_runs_each_candidate_on_validation_with_its_flags(tmp_path, monkeypatch):
    """`--recipes`: each candidate is the harder variant's arm, seed 42, on validation, its flags last (so they
    override the recipe file), in its own directory; then the screen's results are written where asked."""
    seen = []
    monkeypatch.setattr(tools, "ensure_reference", lambda task: tools.REPO / "checkpoints" / task)
    monkeypatch.setattr(tools, "run_logged", lambda cmd, d: seen.append((cmd, d)) or 0)
    out = tmp_path / "results.json"
    names = ["lr2e-3", "informative"]
    # (the fake runs wrote no metrics: nothing to choose from, said, and no results file)
    assert tools.main(["--recipes", *names, "--output_dir", str(tmp_path), "--results", str(out)]) == 1
    assert not out.exists()
    assert [d for _, d in seen] == [tools.recipe_dir(tmp_path, n) for n in names]
    for (cmd, _), n in zip(seen, names, strict=True):
        assert (
            cmd[cmd.index("--config") + 1] == tools.DIGITS
            and cmd[cmd.index("--dataset_test_split") + 1] == "validation"
        )
        assert (
            cmd[cmd.index("--seed") + 1] == "42" and cmd[-len(tools.RECIPES[n][1]) :] == tools.RECIPES[n][1]
        )
        assert "--environment" not in cmd


@pytest.mark.parametrize(
    "prompt, completion, kind",
    [
        ("37*48=", "1776<eos>", "a direct answer"),
        ("37*48=", "<37*8=296>1776<eos>", "another shape"),
        ("37*48=", "<37*8=296><37*4=148>296=14801776<eos>", "another shape"),  # (no '+')
        ("37*48=", "<37*8=296><37*4=?>296+1480=1776<eos>", "another shape"),  # (a failed call)
        (
            "37*48=",
            "<37*4=148><37*8=296>148+2960=3108<eos>",
            "a call copies the prompt wrong",
        ),  # digits swapped
        ("37*48=", "<73*8=584><37*4=148>584+1480=2064<eos>", "a call copies the prompt wrong"),
        (
            "37*48=",
            "<37*8=296><37*4=148>296+148=444<eos>",
            "a reply copied wrong into the sum",
        ),  # not shifted
        ("37*48=", "<37*8=296><37*4=148>269+1480=1749<eos>", "a reply copied wrong into the sum"),
        ("37*48=", "<37*8=296><37*4=148>296+1480=1766<eos>", "the sum worked wrong"),
        ("314*55=", "<314*5=1570><314*5=1570>1570+15700=17270<eos>", "right"),
    ],
)
def test_a_failure_is_placed_at_the_first_step_that_departs_from_the_worked_product(prompt, completion, kind):
    assert tools.failure_kind(prompt, completion) == kind


def test_every_gold_worked_product_is_right():
    """The task's own gold completions (tinygrpo/data/tasks/multiplication.py's tool_digits, another writer) read as
    right, every operand pair of the problem sizes included by their extremes."""
    from tinygrpo.data.tasks.multiplication import tool_digits

    for a in (10, 37, 99, 100, 481, 999):
        for b in (10, 19, 48, 90, 99):
            assert tools.failure_kind(f"{a}*{b}=", tool_digits(a, b) + "<eos>") == "right"
