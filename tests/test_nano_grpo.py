"""nano_grpo.py is the trainer: in float64 with the same seed, train_grpo.py with configs/plain.yaml's flags and
nano_grpo.py draw the same completions at every step, compute the same loss, and end with the same parameters, with
beta 0 and beta > 0. Two independent computations of one algorithm: nano_grpo.py writes every formula out and
imports nothing of tinygrpo."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import nano_grpo
import train_grpo
from tinygrpo.sft.train import SFTConfig, train_reference

REPO = Path(train_grpo.__file__).resolve().parent
STEPS, G, BATCH = 20, 8, 128  # 16 prompts x 8 completions a step
PROBLEMS = 56  # a small training set, so that the 320 prompts drawn make 5 passes over it, each a new order
# Two float64 runs of the same math in other orders of summation differ by a few ulps a step (~1e-15 here), except
# where AdamW turns rounding noise into steps: a key bias's gradient is 0 in exact arithmetic (a softmax is blind to a
# constant added to every key), so its m / sqrt(v) is noise over noise, bounded by lr * noise / eps (~3e-12 seen).
# float32's rounding anywhere (the float32 rewards and advantages aside, which both keep) would show as ~1e-9 in the
# parameters after 20 steps: the bound sits between.
RTOL = 1e-10


@pytest.fixture(scope="module")
def addition_reference(tmp_path_factory) -> str:
    """A small reference SFT'd briefly on addition: right on some prompts, wrong on others, so groups differ."""
    out = tmp_path_factory.mktemp("nano_reference")
    overrides = dict(
        n_embd=32, n_head=2, n_positions=16, max_steps=300, logging_steps=0, dataset_test_split=""
    )
    train_reference(SFTConfig.for_task("addition", output_dir=str(out), **overrides), verbose=False)
    return str(out)


@pytest.fixture(scope="module")
def few_problems(tmp_path_factory) -> str:
    """A directory of PROBLEMS training problems of addition (every 170th, so both digits vary)."""
    out = tmp_path_factory.mktemp("few_problems")
    lines = (REPO / "data/addition/train.jsonl").read_text().splitlines()[::170][:PROBLEMS]
    assert len(lines) == PROBLEMS
    (out / "train.jsonl").write_text("\n".join(lines) + "\n")
    return str(out)


def trainer_run(
    ref: str, data: str, out: Path, beta: float
) -> tuple[list[list[str]], list[float | None], dict]:
    """train_grpo.py with the plain flags: each step's completions (in sampling order), each step's loss (None:
    no update), the final parameters."""
    argv = ["--config", str(REPO / "configs/plain.yaml"), "--model_name_or_path", ref, "--dtype", "float64"]
    argv += ["--dataset_name", data, "--dataset_train_split", "train"]
    argv += f"--max_steps {STEPS} --per_device_train_batch_size {BATCH} --num_generations {G} --beta {beta}".split()
    argv += f"--logging_steps 1 --num_completions_to_print {BATCH} --output_dir {out}".split() + [
        "--dataset_test_split",
        "",
    ]
    argv += "--save_steps 0 --make_plots false --make_report false --signal_forecast_prompts 0".split()
    argv += "--disable_tqdm true --torch_num_threads 1".split()
    assert train_grpo.main(argv) == 0
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    completions = [
        [r["completion"] for r in sorted((r for r in rows if r["step"] == s), key=lambda r: r["group"])]
        for s in range(1, STEPS + 1)
    ]  # (a stable sort: within a group, sampling order)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [m.get("loss") for m in metrics if m["step"] >= 1]
    return completions, losses, load_file(str(out / "final" / "model.safetensors"))


def nano_run(ref: str, data: str, beta: float) -> tuple[list[list[str]], list[float], dict]:
    completions, losses = [], []

    def record(step: int, texts: list[str], loss: float) -> None:
        completions.append(texts)
        losses.append(loss)

    argv = ["--model_name_or_path", ref, "--dataset", data, "--dtype", "float64"]
    argv += f"--max_steps {STEPS} --per_device_train_batch_size {BATCH} --num_generations {G} --beta {beta}".split()
    argv += ["--eval_split", ""]
    model = nano_grpo.train(nano_grpo.parse_args(argv), on_step=record)
    return completions, losses, {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_nano_grpo_is_the_trainer(addition_reference, few_problems, tmp_path, beta):
    """Both draw the prompts pass after pass over a small training set (5 passes: a pass's order is its own), sample
    the same completions, compute the same losses and end with the same parameters."""
    torch.set_num_threads(1)
    want_completions, want_losses, want_params = trainer_run(
        addition_reference, few_problems, tmp_path / "run", beta
    )
    got_completions, got_losses, got_params = nano_run(addition_reference, few_problems, beta)
    # the case is the interesting one: groups with signal every step, rewards that differ, weights that moved
    start = load_file(str(Path(addition_reference) / "model.safetensors"))
    assert all(len(set(c)) > G for c in want_completions)
    assert sum(loss is not None and loss != 0 for loss in want_losses) >= STEPS // 2
    assert got_completions == want_completions  # the same draws, token for token, at every step
    for step, (got, want) in enumerate(zip(got_losses, want_losses, strict=True), 1):
        # (None: no group with signal and no KL, so the trainer took no step; nano's loss is then 0)
        assert got == pytest.approx(want or 0.0, rel=RTOL, abs=RTOL * 1e-3), f"step {step}"
    assert want_params.keys() <= got_params.keys()
    for name, want in want_params.items():
        got = got_params[name].to(want.dtype)
        assert want.dtype == torch.float64 and not torch.equal(want, start[name].double()), name
        scale = want.abs().max().clamp(min=1.0)
        assert (got - want).abs().max() <= RTOL * scale, (name, float((got - want).abs().max()))


def test_nano_grpo_imports_none_of_the_trainer():
    """The reading edition stands alone: torch, transformers, tiny_lm and the reward, and the standard library."""
    tree = ast.parse((REPO / "nano_grpo.py").read_text())
    imported = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported - {"__future__", "argparse", "itertools", "json", "math", "sys", "time", "pathlib"} == {
        "torch",
        "transformers",
        "tiny_lm",
        "rewards",
    }
    assert len((REPO / "nano_grpo.py").read_text().splitlines()) <= 250


@pytest.mark.slow
def test_the_study_reads_what_nano_grpo_prints_and_renders_medians(addition_reference, capsys):
    from studies import nano

    argv = ["--model_name_or_path", addition_reference, "--dataset", str(REPO / "data/addition")]
    argv += "--max_steps 2 --eval_steps 1 --per_device_train_batch_size 16 --eval_split validation".split()
    nano_grpo.train(nano_grpo.parse_args(argv))
    printed = [m for line in capsys.readouterr().out.splitlines() if (m := nano.LINE.match(line))]
    assert [int(m[1]) for m in printed] == [0, 1, 2]
    runs = [
        {
            "split": "test",
            "max_steps": 500,
            "seed": s,
            "seconds": t,
            "curve": [[0, 0.61], [500, a]],
            "command": "",
        }
        for s, t, a in [(42, 90.0, 0.95), (1, 100.0, 0.90), (2, 200.0, 0.96)]
    ]
    shown = nano.table(nano.summarize(runs, "python -m studies.nano"))
    assert "**95.0%** (95.0% / 90.0% / 96.0%)" in shown and "| 100 s |" in shown  # medians, not means


# ------------------------------------------------------------------------------------------------ bad input
# Each count's least value, as the algorithm needs it: a group-relative advantage divides by its group's std, which
# one sample does not have (NaN); every other count is a number of things that must happen at least once.
LEAST = {
    "num_generations": 2,
    "per_device_train_batch_size": 1,
    "max_completion_length": 1,
    "max_steps": 1,
    "eval_steps": 1,
}


@pytest.fixture
def tripwire(tmp_path) -> Path:
    """A model directory that passes for one (it has a config.json) and fails loudly if anything loads it: a run
    refused in one line before it got there loaded nothing."""
    (tmp_path / "tripwire").mkdir()
    (tmp_path / "tripwire" / "config.json").write_text("{}")
    return tmp_path / "tripwire"


def _good(model: Path) -> list[str]:
    """Options that pass every check: the least of every count, the repository's data."""
    argv = ["--model_name_or_path", str(model), "--dataset", str(REPO / "data/addition")]
    least = {**LEAST, "per_device_train_batch_size": 2}  # (whole groups: a multiple of G = 2)
    return argv + [f"--{name}={value}" for name, value in least.items()]


def _refused(argv: list[str], capsys, monkeypatch) -> str:
    """nano_grpo's main on argv, with training replaced by a recorder: the one stderr line of a refusal, once
    checked that it is one `error:` line, a non-zero exit, nothing on stdout, and that training never started."""
    started = []
    monkeypatch.setattr(nano_grpo, "train", lambda args, on_step=None: started.append(args))
    rc = nano_grpo.main(argv)
    out, err = capsys.readouterr()
    assert rc != 0 and not started and out == "", (rc, started, out)
    (line,) = err.splitlines()
    assert line.startswith("error: "), line
    return line


def test_the_least_of_every_count_is_accepted(tripwire, capsys, monkeypatch):
    """The checks refuse only what is wrong: with every count at its least value, main goes on to train."""
    started = []
    monkeypatch.setattr(nano_grpo, "train", lambda args, on_step=None: started.append(args))
    assert nano_grpo.main(_good(tripwire)) == 0
    assert len(started) == 1 and capsys.readouterr().err == ""
    assert {name: getattr(started[0], name) for name in LEAST} == {**LEAST, "per_device_train_batch_size": 2}


@pytest.mark.parametrize(
    ("name", "value"),
    [(name, value) for name in LEAST for value in (0, -1)] + [("num_generations", 1)],
)
def test_a_count_below_its_least_is_refused_in_one_line_before_training(
    name, value, tripwire, capsys, monkeypatch
):
    """Every count, at 0 and -1, and G = 1: one line naming the option and its value, and no training. (Unchecked,
    G = 1 trains on NaN advantages, the std of a group of one, and eval_steps 0 dies mid-run on `step % 0`.)"""
    line = _refused([*_good(tripwire), f"--{name}", str(value)], capsys, monkeypatch)
    assert f"--{name}" in line and f"got {value}" in line, line


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--dataset", "{t}/nowhere"], "--dataset {t}/nowhere"),
        (["--dataset", "{t}"], "--dataset {t} has no train.jsonl"),
        (["--eval_split", "tset"], "has no tset.jsonl"),
        (["--model_name_or_path", "{t}/nowhere"], "no model at {t}/nowhere"),
        (["--per_device_train_batch_size", "3"], "--per_device_train_batch_size 3"),  # (G = 2)
    ],
    ids=["no_dataset", "no_train_split", "no_eval_split", "no_model", "part_groups"],
)
def test_a_missing_path_or_a_batch_of_part_groups_is_refused_in_one_line(
    extra, named, tripwire, tmp_path, capsys, monkeypatch
):
    """The files the run reads, checked before it reads any (a dataset directory that is not there was a
    traceback), and a batch of whole groups (B / G prompts a step: a remainder would be dropped unsaid)."""
    argv = [*_good(tripwire), *(a.format(t=tmp_path) for a in extra)]
    line = _refused(argv, capsys, monkeypatch)
    assert named.format(t=tmp_path) in line, line


def test_the_tripwire_model_fails_loudly_if_loaded(tripwire):
    """What makes the tests above and below show that nothing was loaded: a run that gets past the checks to the
    tripwire dies with a traceback, not one `error:` line."""
    with pytest.raises(Exception):  # noqa: B017  (whichever loader's error: transformers' own)
        nano_grpo.train(nano_grpo.parse_args(_good(tripwire)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--num_generations", "1"], "--num_generations must be >= 2, got 1"),
        (["--dataset", "{t}/nowhere"], "--dataset {t}/nowhere: no such directory"),
        (["--eval_steps", "0"], "--eval_steps must be >= 1, got 0"),
    ],
    ids=["one_generation", "no_dataset", "eval_steps_0"],
)
def test_the_command_refuses_each_class_of_bad_input_in_one_line_before_loading(
    extra, named, tripwire, tmp_path
):
    """`python nano_grpo.py` itself (one process each, ~10 s: torch and transformers imported): exit status 1, one
    `error:` line on stderr and nothing else, nothing on stdout. The model is the tripwire: had the run loaded it,
    stderr would hold a traceback."""
    argv = [*_good(tripwire), *(a.format(t=tmp_path) for a in extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "nano_grpo.py", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {named.format(t=tmp_path)}"]
    assert proc.stdout == ""
