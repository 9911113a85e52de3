"""Data of one's own without silent traps: the reward that decides held-out accuracy is said and checked against
every gold answer at start-up; splits that share prompts stop the run; a task from a file or a module; TRL's names.
Each refusal is one `error:` line before any training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from _runs import run_inproc

from tinygrpo.data.problems import DATA_DIR
from tinygrpo.data.task import get_task

ROOT = Path(__file__).resolve().parent.parent


def one_error(capfd, err: str | None = None) -> str:
    err = capfd.readouterr().err if err is None else err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def countdown_copy(tmp_path) -> Path:
    """An unchanged copy of data/countdown under another path, its manifest left behind (the user's own now)."""
    d = tmp_path / "my_countdown"
    d.mkdir()
    for split in ("train", "test"):
        shutil.copy(DATA_DIR / "countdown" / f"{split}.jsonl", d / f"{split}.jsonl")
    return d


@pytest.fixture(scope="module")
def countdown_reference(tmp_path_factory) -> str:
    """A random tiny policy that speaks countdown's characters (the checks here come before any sampling)."""
    import torch

    from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer

    d = tmp_path_factory.mktemp("countdown_reference")
    tok = build_tokenizer(get_task("countdown").chars)
    torch.manual_seed(0)
    TinyLMForCausalLM(
        TinyLMConfig(vocab_size=len(tok), n_embd=16, n_head=2, n_layer=1, n_positions=48)
    ).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


@pytest.mark.slow
def test_data_of_ones_own_is_judged_by_the_rule_one_chooses(
    countdown_reference, countdown_copy, tmp_path, capfd
):
    # The default rule (the strict integer) cannot read countdown's answers: stopped at start-up, naming the row
    # and the rule, with or without a held-out split (each step's verified metrics judge the train split too).
    base = ["--dataset_name", str(countdown_copy), "--reward_funcs", "countdown", "--max_steps", "1"]
    for eval_split in ("test", ""):
        assert (
            run_inproc(
                countdown_reference, tmp_path / f"r{eval_split}", *base, "--dataset_test_split", eval_split
            )
            == 1
        )
        line = one_error(capfd)
        assert "row 1" in line and "'accuracy'" in line and "--eval_reward" in line, line
        assert not (tmp_path / f"r{eval_split}" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_the_run_says_which_reward_decides_held_out_accuracy(seed_reference, tmp_path, capfd):
    assert run_inproc(seed_reference, tmp_path / "a", "--max_steps", "1") == 0
    out = capfd.readouterr().out
    assert (
        "held-out accuracy: train split, decided by the reward 'accuracy' (the task seed_bank's verifier)"
        in out
    )
    # another rule by name: said, and used (a rule every gold answer passes)
    args = ("--max_steps", "1", "--eval_reward", "accuracy_lenient")
    assert run_inproc(seed_reference, tmp_path / "b", *args) == 0
    assert "decided by the reward 'accuracy_lenient' (--eval_reward)" in capfd.readouterr().out
    # a rule that does not exist: one line
    assert run_inproc(seed_reference, tmp_path / "c", "--eval_reward", "nope") == 1
    assert "nope" in one_error(capfd)


@pytest.mark.slow
@pytest.mark.parametrize(
    "train, held, shared",
    [
        ("train", "validation", 500),  # addition's validation is carved from its train split
        ("train_without_validation", "validation", 0),
        ("train", "test", 0),
    ],
)
def test_splits_that_share_prompts_stop_the_run_unless_asked(
    seed_reference, tmp_path, capfd, train, held, shared
):
    argv = [
        "--dataset_name",
        "addition",
        "--dataset_train_split",
        train,
        "--dataset_test_split",
        held,
        "--max_steps",
        "1",
    ]
    argv += ["--allow_overlapping_splits", "false"]  # (the small settings of the tests turn the check off)
    rc = run_inproc(seed_reference, tmp_path / "o", *argv)
    err = capfd.readouterr().err
    if shared:
        assert rc == 1 and f"share {shared} of the 500 held-out prompts" in one_error(capfd, err), err
        assert "--allow_overlapping_splits" in err
        assert not (tmp_path / "o" / "metrics.jsonl").exists()
        assert run_inproc(seed_reference, tmp_path / "o2", *argv, "--allow_overlapping_splits", "true") == 0
    else:
        assert rc == 0 and "share" not in err, err


def test_each_built_in_recipe_trains_and_evaluates_on_splits_apart():
    """Every task's GRPO recipe: its training split and its held-out split share no prompt; and validation, where a
    task has one, shares none with test nor with the split its studies train on."""
    from tinygrpo.data.task import task_names

    checked = 0
    for name in task_names():
        task = get_task(name)
        if not task.config or ":" in name or not task.build.__module__.startswith("tinygrpo.data.tasks."):
            continue  # (the built-in tasks only: other tests register their own, with data of their own)
        recipe = yaml.safe_load((ROOT / task.config).read_text())
        d = DATA_DIR / task.dataset
        # A recipe that allows overlapping splits has one prompt for every row (guess the number: the hidden number is
        # not in it): its splits are apart in their rows (episodes), by id.
        key = "id" if recipe.get("allow_overlapping_splits") else "prompt"
        prompts = {
            p.stem: {json.loads(line)[key] for line in p.read_text().splitlines()} for p in d.glob("*.jsonl")
        }
        train, held = recipe.get("train_split", "train"), recipe.get("eval_split", "test")
        if held and task.name != "seed_bank":  # (the seed bank's only split is its test, on purpose)
            assert not prompts[train] & prompts[held], (name, train, held)
            checked += 1
        if "validation" in prompts:
            study_train = "train_without_validation" if "train_without_validation" in prompts else "train"
            assert not prompts["validation"] & prompts["test"], name
            assert not prompts["validation"] & prompts[study_train], name
    assert checked >= 5


def test_a_task_from_a_module_or_a_file_by_name(tmp_path, monkeypatch):
    import tinygrpo.data.task

    tinygrpo.data.task.discover_tasks()  # the registry as it was, back after the test (the tasks here are its own)
    monkeypatch.setattr(tinygrpo.data.task, "TASKS", dict(tinygrpo.data.task.TASKS))
    text = (ROOT / "tinygrpo" / "data" / "tasks" / "reverse.py").read_text()
    (tmp_path / "my_reverse.py").write_text(text.replace('name="reverse"', 'name="my_reverse"'))
    assert get_task(str(tmp_path / "my_reverse.py")).name == "my_reverse"
    assert get_task(f"{tmp_path / 'my_reverse.py'}:my_reverse").name == "my_reverse"
    with pytest.raises(ValueError, match="register one task named 'other'"):
        get_task(f"{tmp_path / 'my_reverse.py'}:other")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pkg_tasks.py").write_text(text.replace('name="reverse"', 'name="pkg_reverse"'))
    assert get_task("pkg_tasks:pkg_reverse").name == "pkg_reverse"
    with pytest.raises(ValueError, match="no such file"):
        get_task(str(tmp_path / "missing.py"))
    (tmp_path / "broken.py").write_text("import nothing_here\n")
    with pytest.raises(ValueError, match="importing it failed: ModuleNotFoundError"):
        get_task(str(tmp_path / "broken.py"))
    (tmp_path / "copy.py").write_text(text)  # the built-in's name, unchanged: said, not silently replaced
    with pytest.raises(ValueError, match="already registered"):
        get_task(str(tmp_path / "copy.py"))


def test_a_non_editable_install_finds_data_from_the_repository_root_or_says_how(tmp_path):
    """The package copied away from the repository (as `pip install .` puts it in site-packages): run from the
    repository's root it reads data/ there; run elsewhere, loading a built-in problem set is one line that says
    what to do."""
    import subprocess
    import sys

    site = tmp_path / "site"
    for package in ("tinygrpo", "rewards", "tiny_lm"):
        shutil.copytree(ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import tinygrpo.data.problems as p\n"
        "print(p.DATA_DIR)\n"
        "try:\n    p.load_problems('addition'); print('loaded')\n"
        "except ValueError as e:\n    print('error:', e)\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "TOKENIZERS_PARALLELISM": "false"}
    here = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert here.stdout.splitlines() == [str(ROOT / "data"), "loaded"], here.stderr[-2000:]
    elsewhere = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    lines = elsewhere.stdout.splitlines()
    assert lines[0] == str(tmp_path / "data") and lines[1].startswith("error: dataset 'addition'")
    assert "pip install -e ." in lines[1] and "TINYGRPO_DATA_DIR" in lines[1]


def test_a_verifier_that_gives_partial_credit_to_the_gold_answers_is_refused():
    """check_gold wants exactly 1.0 of every gold answer: a verifier that scores them 0.5 would count right
    answers half right (accuracy counts 1.0 only); refused naming the row and the score."""
    from datasets import Dataset

    from tinygrpo.data.checks import check_gold
    from tinygrpo.data.verifier import Verifier
    from tinygrpo.run.config import ConfigError

    half = Verifier("half", lambda completions, **kw: [0.5] * len(completions))
    rows = Dataset.from_dict({"prompt": ["1+1=", "2+2="], "answer": ["2", "4"]})
    with pytest.raises(
        ConfigError, match="mine row 1: the held-out verifier 'half' scores the gold answer '2' 0.5, not 1.0"
    ):
        check_gold(half, rows, "mine")
    check_gold(Verifier(), rows, "mine")  # (the strict integer rule: every gold answer right)
