"""TRL's step count and the TRL options a run now takes: max_steps counts optimizer steps (max_generations keeps the
old meaning), gradient_accumulation_steps, num_train_epochs, min_p, repetition_penalty, shuffle_dataset,
logging_first_step and num_generations_eval; each against an independent computation (transformers' own logits
processors, a brute-force event rule, TRL's GRPOConfig)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from _runs import run_inproc
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrpo.base.options import ConfigError
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.prompts import PromptSource
from tinygrpo.rollout.sampling import penalize_repeats, sample_from_logits
from tinygrpo.run.config import GRPOConfig, parse_config
from tinygrpo.run.logs import read_jsonl
from tinygrpo.run.trainer import crossed

# ================================================================================================ when events fire


@settings(max_examples=300, deadline=None)
@given(step=st.integers(1, 500), k=st.integers(1, 8), every=st.integers(1, 50))
def test_an_event_fires_after_the_generation_whose_optimizer_steps_pass_its_multiple(step, k, every):
    if step < k:
        step = k  # (a generation ends k optimizer steps after the last one)
    brute = any((step - j) % every == 0 for j in range(k))  # one of this generation's k steps is a multiple
    assert crossed(step, k, every) == brute
    if k == 1:
        assert crossed(step, 1, every) == (step % every == 0)


# ================================================================================================ the step count


def test_max_steps_counts_optimizer_steps_and_max_generations_keeps_the_old_meaning():
    plain = parse_config([])
    assert (
        plain.max_steps == 1000 and plain.updates_per_generation == 1
    )  # (the published runs: one a generation)
    two = parse_config(["--num_iterations", "2"])
    assert two.max_steps == 1000 and two.updates_per_generation == 2  # 500 generations, as TRL counts
    old = parse_config("--num_mini_batches 4 --max_generations 300".split())
    assert (old.max_steps, old.per_device_train_batch_size, old.steps_per_generation) == (1200, 128, 4)
    assert old.generation_size == 512 and old.mini_batches == 4
    assert (
        parse_config(["--max_steps", "-1", "--num_iterations", "3"]).max_steps == 1002
    )  # (whole generations)
    with pytest.raises(ConfigError, match=r"^max_steps=5 counts optimizer steps .* give a multiple of 2"):
        parse_config("--num_iterations 2 --max_steps 5".split())
    # max_generations wins over a max_steps a recipe (or a flag) gives
    assert parse_config("--num_iterations 2 --max_steps 10 --max_generations 4".split()).max_steps == 8


def test_gradient_accumulation_is_one_optimizer_step_over_its_micro_batches():
    acc = parse_config("--per_device_train_batch_size 128 --gradient_accumulation_steps 4".split())
    one = parse_config([])
    for name in ("generation_size", "mini_batches", "updates_per_generation", "needs_old_logps"):
        assert getattr(acc, name) == getattr(one, name), name
    # TRL's steps_per_generation then splits a generation into optimizer steps of accumulated micro-batches
    spg = parse_config(
        "--per_device_train_batch_size 64 --gradient_accumulation_steps 2 --steps_per_generation 8".split()
    )
    assert (spg.generation_size, spg.mini_batches) == (512, 4)
    with pytest.raises(
        ConfigError, match="steps_per_generation=3 is not a multiple of gradient_accumulation_steps=2"
    ):
        parse_config(
            "--per_device_train_batch_size 64 --gradient_accumulation_steps 2 --steps_per_generation 3".split()
        )
    # a micro-batch may split a group, an optimizer step may not (TRL asks the same of a generation)
    assert (
        parse_config(
            "--per_device_train_batch_size 4 --gradient_accumulation_steps 2".split()
        ).generation_size
        == 8
    )
    with pytest.raises(ConfigError, match=r"x gradient_accumulation_steps=3 = 12 is not a positive multiple"):
        parse_config("--per_device_train_batch_size 4 --gradient_accumulation_steps 3".split())


def test_gradient_accumulation_trains_exactly_as_the_whole_batch(seed_reference, tmp_path):
    common = [
        *"--dataset_test_split none --num_generations 4 --max_completion_length 3 --max_steps 2 --logging_steps 1".split(),
        *"--save_steps 0 --dynamic_sampling false --explore_rounds 0 --dtype float64".split(),
    ]
    whole, accumulated = tmp_path / "whole", tmp_path / "accumulated"
    assert run_inproc(seed_reference, whole, *common, "--per_device_train_batch_size", "32") == 0
    flags = "--per_device_train_batch_size 8 --gradient_accumulation_steps 4".split()
    assert run_inproc(seed_reference, accumulated, *common, *flags) == 0
    a, b = (
        [
            {k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
            for r in read_jsonl(d / "metrics.jsonl")
        ]
        for d in (whole, accumulated)
    )
    assert [r["step"] for r in a if r["step"]] == [1, 2] and a == b


@pytest.mark.parametrize(
    "epochs,prompts,processes,steps",
    [(1.0, 640, 1, 10), (0.5, 640, 1, 5), (1.0, 650, 1, 11), (2.0, 640, 2, 10), (0.01, 640, 1, 1)],
)
def test_num_train_epochs_is_passes_over_the_prompts_in_whole_generations(epochs, prompts, processes, steps):
    cfg = GRPOConfig(num_train_epochs=epochs)  # 64 prompts a generation per process
    assert cfg.max_steps is None
    cfg.resolve_length(prompts, processes, cfg.unit)
    per_generation = 64 * processes
    assert cfg.max_steps == steps == max(1, math.ceil(epochs * prompts / per_generation))
    given = GRPOConfig(num_train_epochs=epochs, max_steps=7)  # (TRL: max_steps, when given, wins)
    given.resolve_length(prompts, processes, given.unit)
    assert given.max_steps == 7


# ================================================================================================ sampling


def _uniform_draws(logits: torch.Tensor, params: SamplingParams, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return sample_from_logits(logits, params, gen)


@pytest.mark.parametrize("min_p", [0.05, 0.3, 0.9])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.6])
def test_min_p_samples_as_transformers_min_p_warper_filters(min_p, temperature):
    from transformers.generation.logits_process import MinPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(64, 17) * 3
    ours = SamplingParams(4, temperature=temperature, min_p=min_p)
    filtered = MinPLogitsWarper(min_p)(
        None, logits / temperature
    )  # theirs: after the temperature, as in generate
    plain = SamplingParams(4, temperature=1.0)
    for seed in range(5):  # the same uniforms against the same kept set: the same tokens
        assert torch.equal(_uniform_draws(logits, ours, seed), _uniform_draws(filtered, plain, seed))


@pytest.mark.parametrize("penalty", [0.5, 1.3, 4.0])
def test_the_repetition_penalty_is_transformers_processor(penalty):
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    torch.manual_seed(1)
    logits, ids = torch.randn(8, 11), torch.randint(0, 11, (8, 5))
    seen = torch.zeros(8, 11, dtype=torch.bool).scatter(1, ids, True)
    theirs = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
    assert torch.equal(penalize_repeats(logits, seen, penalty), theirs)


def test_filters_off_sample_exactly_as_before():
    torch.manual_seed(2)
    logits = torch.randn(32, 13)
    base = SamplingParams(4, temperature=1.3, top_k=6)
    off = SamplingParams(4, temperature=1.3, top_k=6, min_p=0.0, repetition_penalty=1.0)
    assert torch.equal(_uniform_draws(logits, base, 3), _uniform_draws(logits, off, 3))


class _TableDecoder:
    """A decoder whose logits are a fixed random table (step, row): decoding's bookkeeping without a model."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table, self.rows, self.t = table, torch.arange(table.size(1)), 0
        self.logits = table[0]

    def keep(self, rows: torch.Tensor) -> None:
        self.rows = self.rows[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.t += 1
        self.logits = self.table[self.t, self.rows]
        return self.logits


@pytest.mark.parametrize("penalty", [1.5, 8.0])
def test_decoding_penalises_every_token_of_the_prompt_and_the_completion_so_far(penalty):
    """decode's running record of the tokens seen, against transformers' processor on each row's whole history."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    from tinygrpo.rollout.sampling import decode

    B, V, T, eos, pad = 6, 9, 7, 8, 0
    torch.manual_seed(4)
    table = torch.randn(T, B, V) * 2
    prompts = [torch.randint(1, V, (3,)).tolist() for _ in range(B)]
    seen = torch.zeros(B, V, dtype=torch.bool)
    for b, ids in enumerate(prompts):
        seen[b, ids] = True
    params = SamplingParams(T, temperature=0.8, repetition_penalty=penalty)
    gen = torch.Generator().manual_seed(5)
    ours = decode(
        _TableDecoder(table),
        params,
        gen,
        eos_token_id=eos,
        pad_token_id=pad,
        seen=seen,
    )
    # the reference: each live row's logits through transformers' processor on prompt + completion so far
    gen = torch.Generator().manual_seed(5)
    plain = SamplingParams(T, temperature=0.8)
    processor = RepetitionPenaltyLogitsProcessor(penalty)
    history, live, out = [list(p) for p in prompts], list(range(B)), [[] for _ in range(B)]
    for step in range(T):
        rows = [processor(torch.tensor([history[b]]), table[step, b : b + 1].clone()) for b in live]
        nxt = sample_from_logits(torch.cat(rows), plain, gen).tolist()
        for b, tok in zip(live, nxt, strict=True):
            out[b].append(tok)
            history[b].append(tok)
        live = [b for b, tok in zip(live, nxt, strict=True) if tok != eos]
        if not live:
            break
    width = ours.completion_ids.size(1)
    expected = torch.tensor([row + [pad] * (width - len(row)) for row in out])
    assert torch.equal(ours.completion_ids, expected)
    if penalty > 2:  # (and the penalty changed what was sampled: the test can tell)
        gen = torch.Generator().manual_seed(5)
        free = decode(
            _TableDecoder(table),
            dataclasses.replace(params, repetition_penalty=1.0),
            gen,
            eos_token_id=eos,
            pad_token_id=pad,
        )
        assert not torch.equal(free.completion_ids, ours.completion_ids)


# ================================================================================================ data and logs


class _Rows:
    def __init__(self, n: int) -> None:
        self.n = n

    def to_dict(self) -> dict:
        return {"prompt": [f"{i}+1=" for i in range(self.n)], "answer": [str(i + 1) for i in range(self.n)]}


class _Tok:
    pad_token_id = 0

    def __call__(self, texts):
        return {"input_ids": [[1 + (ord(c) % 10) for c in t] for t in texts]}


def test_shuffle_dataset_false_takes_the_prompts_in_the_datasets_order():
    ordered = PromptSource(_Rows(7), _Tok(), 42, "uniform", shuffle=False)
    assert ordered.take(10) == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]
    shuffled = PromptSource(_Rows(7), _Tok(), 42, "uniform")
    first = shuffled.take(7)
    assert sorted(first) == list(range(7)) and first != list(
        range(7)
    )  # (seed 42's order is not the identity)
    with pytest.raises(ConfigError, match="^shuffle_dataset false .* prompt_sampler unsolved does not"):
        parse_config(["--shuffle_dataset", "false"])
    assert parse_config("--shuffle_dataset false --prompt_sampler uniform".split()).shuffle_dataset is False


def test_logging_first_step_and_num_generations_eval(seed_reference, tmp_path):
    common = [
        *"--num_generations 4 --per_device_train_batch_size 16 --max_completion_length 3 --max_steps 3".split(),
        *"--logging_steps 10 --eval_steps 10 --save_steps 0 --dynamic_sampling false --explore_rounds 0".split(),
    ]
    first = tmp_path / "first"
    flags = ["--logging_first_step", "true", "--num_generations_eval", "3"]
    assert run_inproc(seed_reference, first, *common, *flags) == 0
    rows_first = read_jsonl(first / "metrics.jsonl")
    assert [r["step"] for r in rows_first] == [0, 1, 3]  # (without it: 0 and the last, logging_steps 10)
    for r in rows_first:
        if "eval/accuracy" in r:  # the samples' mean accuracy, never above pass@3 (any of the same samples)
            assert 0 <= r["eval/sampled_accuracy"] <= r["eval/pass@3"] <= 1
    with pytest.raises(ConfigError, match="num_generations_eval=3 and eval_pass_k=2 both say"):
        parse_config("--num_generations_eval 3 --eval_pass_k 2".split())


@pytest.mark.parametrize(
    "flags",
    [
        "--num_iterations 2 --per_device_train_batch_size 16 --max_steps 6",  # k = 2: two passes a generation
        "--per_device_train_batch_size 8 --steps_per_generation 2 --max_steps 6",  # k = 2: two optimizer steps
    ],
    ids=["num_iterations", "steps_per_generation"],
)
def test_logging_first_step_logs_the_first_generation_when_it_makes_several_optimizer_steps(
    seed_reference, tmp_path, flags
):
    """logging_first_step logs TRL's optimizer step 1; a generation of k > 1 optimizer steps holds steps 1..k, so its
    row (step k) is logged. A check of `step == 1` would never hold there (the step count moves k at a time) and
    would silently drop the first row whenever a generation makes several optimizer steps."""
    common = [
        *"--num_generations 4 --max_completion_length 3 --logging_steps 10 --eval_steps 10".split(),
        *"--save_steps 0 --dynamic_sampling false --explore_rounds 0 --logging_first_step true".split(),
    ]
    assert run_inproc(seed_reference, tmp_path, *common, *flags.split()) == 0
    cfg = parse_config([*common, *flags.split()])
    k, last, every = cfg.updates_per_generation, cfg.max_steps, cfg.logging_steps
    assert k == 2 and every > last  # (the first row can only come from logging_first_step)
    # TRL's rule, optimizer step by optimizer step: a row at the end of each generation holding a logged step
    trl_logged = {j for j in range(1, last + 1) if j % every == 0 or j == 1 or j == last}
    ends = [s for s in range(k, last + 1, k) if trl_logged & set(range(s - k + 1, s + 1))]
    assert ends == [2, 6]
    logged = [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")]
    assert logged == [0, *ends]  # (0: the evaluation before training)


# ================================================================================================ TRL's own config


def test_a_trl_grpo_configs_fields_for_these_concepts_run_unchanged_as_flags(tmp_path):
    trl = pytest.importorskip("trl")
    theirs = {
        "per_device_train_batch_size": 64,
        "gradient_accumulation_steps": 2,
        "steps_per_generation": 4,
        "num_generations": 8,
        "num_iterations": 2,
        "max_steps": 40,
        "num_train_epochs": 2.0,
        "lr_scheduler_type": "linear",
        "top_p": 0.95,
        "seed": 3,
        "logging_steps": 4,
        "save_steps": 20,
        "epsilon_high": 0.28,
        "scale_rewards": "batch",
        "mask_truncated_completions": True,
        "num_completions_to_print": 4,
        "adam_epsilon": 1e-6,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "shuffle_dataset": False,
        "run_name": "mine",
        "logging_first_step": True,
        "num_generations_eval": 4,
        "temperature": 0.9,
        "top_k": 5,
        "learning_rate": 1e-3,
        "beta": 0.04,
        "epsilon": 0.2,
        "loss_type": "dapo",
    }
    # the warm-up ratio under the installed transformers' name: warmup_ratio (4.x), or warmup_steps in (0, 1) (5.x)
    has_ratio = "warmup_ratio" in {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    theirs["warmup_ratio" if has_ratio else "warmup_steps"] = 0.1
    trl_cfg = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"), report_to="none", bf16=False, use_cpu=True, **theirs
    )
    flags = []
    for name in theirs:
        value = getattr(trl_cfg, name)
        value = getattr(value, "value", value)  # (an enum, as TRL stores lr_scheduler_type: its value)
        flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    ours = parse_config(
        [*flags, "--prompt_sampler", "uniform"]
    )  # (shuffle_dataset false: the dataset's order)
    for name, value in theirs.items():
        assert getattr(ours, name) == value, name
    # TRL's arithmetic: optimizer steps per generation = steps_per_generation / gradient_accumulation_steps x mu
    assert (
        ours.updates_per_generation == trl_cfg.steps_per_generation // trl_cfg.gradient_accumulation_steps * 2
    )
    assert ours.generation_size == trl_cfg.generation_batch_size  # (one process)
    # TRL's script names read back under those names (ours stay the fields' names)
    script = parse_config(
        "--dataset_name seed_bank --dataset_train_split train --dataset_test_split none".split()
    )
    assert (script.dataset_name, script.dataset_train_split, script.dataset_test_split) == (
        "seed_bank",
        "train",
        None,
    )


def test_a_checkpoint_of_other_settings_is_refused_naming_the_field(tmp_path):
    from dataclasses import asdict

    from tinygrpo.run.checkpoint import check_same_run

    cfg = parse_config([])
    check_same_run(asdict(cfg), cfg, tmp_path)  # the same run
    with pytest.raises(ConfigError, match=r"dataset_name 'seed_bank' -> 'addition'"):
        check_same_run({**asdict(cfg), "dataset_name": "seed_bank"}, cfg, tmp_path)
