"""reasoning-gym's datasets as tasks (tinygrpo/data/tasks/reasoning_gym.py): the adapter, its reward, its errors, and one
short run end to end. CI installs the extra (the test extra holds it): there a missing reasoning-gym fails."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

import train_grpo
from rewards import EOS, resolve_reward
from tinygrpo.data.task import get_task, task_of_dataset
from tinygrpo.data.verifier import Verifier

rg = (
    importlib.import_module("reasoning_gym") if os.environ.get("CI") else pytest.importorskip("reasoning_gym")
)
REPO = Path(train_grpo.__file__).resolve().parent
NAMES = ("chain_sum", "spell_backward", "basic_arithmetic", "binary_alternation")


@pytest.fixture(scope="module")
def tasks():
    return {name: get_task(f"reasoning_gym:{name}") for name in NAMES}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_adapter_splits_alphabet_and_gold_answers(name, tasks):
    task = tasks[name]
    splits = task.build()
    assert task.build() == splits  # seeded
    prompts = {s: {r["prompt"] for r in rows} for s, rows in splits.items()}
    assert not prompts["train"] & prompts["test"] and not prompts["validation"] & prompts["test"]
    assert not prompts["train"] & prompts["validation"]
    verifier = Verifier("reasoning_gym", resolve_reward("reasoning_gym"))
    for split, rows in splits.items():
        table = {c: [r[c] for r in rows] for c in rows[0]}
        assert set("".join(table["prompt"]) + "".join(table["answer"])) <= set(task.chars)
        assert all(verifier([a + EOS for a in table["answer"]], table)), split  # reasoning-gym's own score
        assert not any(
            verifier(table["answer"][:20], {c: v[:20] for c, v in table.items()})
        )  # no <eos>: wrong
        # The prompt is the question without the shared instruction: it is inside reasoning-gym's question.
        for r in rows[:50]:
            entry = json.loads(r["entry"])
            assert r["prompt"].rstrip("=").strip() in entry["question"] and entry["answer"] == r["answer"]


def test_wrong_answers_score_below_one(tasks):
    rows = tasks["chain_sum"].build()["test"][:50]
    entries = [r["entry"] for r in rows]
    wrong = [str(int(r["answer"]) + 1) + EOS for r in rows]
    assert all(s < 1.0 for s in resolve_reward("reasoning_gym")(completions=wrong, entry=entries))


def test_chain_sum_worked_is_reasoning_gyms_problems_in_the_built_in_format(tasks):
    """reasoning_gym:chain_sum_worked: reasoning-gym's own rows (the same splits, answers and entries), each prompt the
    built-in chain_sum's padded layout of the entry's expression and its worked target the built-in's; scored by
    reasoning-gym's score_answer on the final answer (worked or direct right, a wrong answer after the work not)."""
    from tinygrpo.data.tasks import chain_sum

    worked_task = get_task("reasoning_gym:chain_sum_worked")
    assert worked_task.dataset == "reasoning_gym_chain_sum_worked" and worked_task.target == "worked"
    plain, worked = tasks["chain_sum"].build(), worked_task.build()
    assert plain.keys() == worked.keys()
    score = resolve_reward("reasoning_gym_final_answer")
    for split, rows in worked.items():
        assert len(rows) == len(plain[split])
        for r, p in zip(rows, plain[split], strict=True):
            words = json.loads(r["entry"])["metadata"]["expression"].split()
            terms, ops = [int(w) for w in words[::2]], words[1::2]
            assert (r["id"], r["answer"], r["entry"]) == (p["id"], p["answer"], p["entry"])
            assert r["prompt"] == chain_sum.padded(terms, ops) and r["worked"] == chain_sum.worked_total(
                terms, ops
            )
        head = rows[:100]
        entries = [r["entry"] for r in head]
        work = [r["worked"].rpartition("=")[0] for r in head]
        right = [w + "=" + r["answer"] + EOS for w, r in zip(work, head, strict=True)]
        wrong = [w + "=" + str(int(r["answer"]) + 1) + EOS for w, r in zip(work, head, strict=True)]
        assert score(completions=right, entry=entries) == [1.0] * len(head), split
        assert score(completions=[r["answer"] + EOS for r in head], entry=entries) == [1.0] * len(head)
        assert all(s < 1.0 for s in score(completions=wrong, entry=entries))
        assert set("".join(r["prompt"] + r["worked"] for r in rows)) <= set(worked_task.chars)
    assert Verifier.of("reasoning_gym_chain_sum_worked").name == "reasoning_gym_final_answer"


def test_family_lookups_and_errors():
    assert task_of_dataset("reasoning_gym_chain_sum").name == "reasoning_gym:chain_sum"
    assert Verifier.of("reasoning_gym_chain_sum").name == "reasoning_gym"
    with pytest.raises(ValueError, match="reasoning-gym has no dataset 'no_such_set' \\(it has: .*chain_sum"):
        get_task("reasoning_gym:no_such_set")
    with pytest.raises(ValueError, match="known tasks: .*reasoning_gym:NAME"):
        get_task("reasoning_gim:chain_sum")


def test_missing_extra_says_how_to_install(monkeypatch):
    from tinygrpo.data.tasks import reasoning_gym as adapter

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails as when it is not installed
    with pytest.raises(ValueError, match=r"need the reasoning-gym package: pip install reasoning-gym"):
        adapter.make("chain_sum")


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, config",
    [
        ("reasoning_gym:chain_sum", "configs/reasoning_gym.yaml"),
        ("reasoning_gym:chain_sum_worked", "configs/reasoning_gym_chain_sum_worked.yaml"),
    ],
)
def test_chain_sum_trains_end_to_end(task, config, tmp_path, capfd):
    """train_sft.py --task TASK (shrunk), then two GRPO steps of its config."""
    import train_grpo
    import train_sft

    ref, out = tmp_path / "ref", tmp_path / "run"
    shrink = "--n_layer 1 --n_embd 32 --max_steps 20 --per_device_train_batch_size 32 --dataset_test_split validation --torch_num_threads 1".split()
    assert train_sft.main(["--task", task, "--output_dir", str(ref), *shrink]) == 0, capfd.readouterr().err
    grpo = [
        "--config",
        config,
        "--model_name_or_path",
        str(ref),
        "--output_dir",
        str(out),
    ]
    grpo += "--max_steps 2 --per_device_train_batch_size 16 --dataset_test_split validation --eval_steps 2".split()
    grpo += "--save_steps 0 --make_plots false --disable_tqdm true --torch_num_threads 1".split()
    assert train_grpo.main(grpo) == 0, capfd.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/accuracy" in row for row in rows)
