"""Bad input, by class: every case is one exact `error:` line on stderr, a non-zero exit, no traceback, no training,
and no file the user had changed (the dataset, the model, the recipe, an earlier run's output).

Classes: settings (flags, recipes, values), the output directory, the data, the model and tokenizer, the reward
functions, and resuming. Each case builds its bad input under the test's temporary directory; `{t}`, `{r}` and
`{out}` in an expected line stand for that directory, the reference model and the output directory; `{n}` (a count)
and `{msg}` (a library's own words) for what differs between the supported versions of transformers and safetensors.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _runs import ENV, REPO, cli, snapshot
from safetensors.torch import load_file, save_file

import train_grpo
import train_sft
from tinygrpo.data.problems import DATA_DIR
from tinygrpo.model.memory import gigabytes, memory_budget

# ------------------------------------------------------------------------------------------------ builders


def _yaml(t: Path, text: str) -> list[str]:
    p = t / "recipe.yaml"
    p.write_text(text)
    return ["--config", str(p)]


def _dataset(t: Path, train: str | bytes | None, test: str | None = None, name: str = "ds") -> list[str]:
    """A dataset directory with train.jsonl (the text given) and, optionally, test.jsonl."""
    d = t / name
    d.mkdir()
    if train is not None:
        (d / "train.jsonl").write_bytes(train if isinstance(train, bytes) else train.encode())
    if test is not None:
        (d / "test.jsonl").write_text(test)
    return ["--dataset_name", str(d), "--dataset_test_split", "test" if test is not None else ""]


def _rows(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


GOOD = _rows({"prompt": "1+2=", "answer": "3"}, {"prompt": "2+2=", "answer": "4"})


def _model_copy(t: Path, r: str) -> Path:
    d = t / "model"
    shutil.copytree(r, d)
    return d


def _truncated_weights(t, r, p=None):
    d = _model_copy(t, r)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    return ["--model_name_or_path", str(d)]


def _weights_edit(t, r, edit):
    d = _model_copy(t, r)
    w = load_file(str(d / "model.safetensors"))
    edit(w)
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    return ["--model_name_or_path", str(d)]


def _drop_ln_f(w):
    w.pop("transformer.ln_f.weight")


def _nan_in_ln_f(w):
    w["transformer.ln_f.weight"] = w["transformer.ln_f.weight"].clone()
    w["transformer.ln_f.weight"][0] = float("nan")


def _config(t, r, text):
    d = _model_copy(t, r)
    (d / "config.json").write_text(text)
    return ["--model_name_or_path", str(d)]


def _bert(t, r, p=None):
    cfg = json.loads((Path(r) / "config.json").read_text())
    cfg.pop("auto_map", None)
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    return _config(
        t, r, json.dumps({**cfg, **small, "model_type": "bert", "architectures": ["BertLMHeadModel"]})
    )


def _tokenizer_mismatch(t, r, p=None):
    from tiny_lm.tokenization_tiny_lm import build_tokenizer

    d = _model_copy(t, r)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    build_tokenizer("0123456789+=abc").save_pretrained(d)
    return ["--model_name_or_path", str(d)]


def _reward_file(t, body, func):
    p = t / "myreward.py"
    p.write_text(body)
    return ["--reward_funcs", f"{p}:{func}"]


def _file_at(t, name):
    (t / name).write_text("not a directory\n")
    return []


def _locked(t, r, p=None):
    from tinygrpo.run import launch

    (t / "out").mkdir()
    _locked.fd = launch.lock_output_dir(t / "out")  # held by "another run" (closed by the test)
    return []


NO_REWARD = "def f(completions, **kw):\n    return []\n"


def _symlink(t: Path, name: str, to: Path) -> Path:
    (t / name).symlink_to(to, target_is_directory=True)
    return t / name


def _in_dir(t: Path, d: str, name: str, text: str) -> Path:
    (t / d).mkdir(parents=True, exist_ok=True)
    (t / d / name).write_text(text)
    return t / d / name


def _earlier_run(t, prior, *extra):
    shutil.copytree(prior, t / "out")
    return list(extra)


def _damage(t, prior, which, *extra):
    shutil.copytree(prior, t / "out")
    for step in which:
        p = t / "out" / f"checkpoint-{step}" / "model.safetensors"
        p.write_bytes(p.read_bytes()[:-10])
    return list(extra)


def _pass_at_k(t, body, func, *extra):
    return [*_reward_file(t, body, func), "--advantage_mode", "pass_at_k", "--train_pass_k", "2", *extra]


HALF = "def half(completions, answer, **kw):\n    return [0.5 if c == a + '<eos>' else 0.0 for c, a in zip(completions, answer)]\n"
HUGE = "def huge(completions, **kw):\n    return [1e300] * len(completions)\n"


def _no_tokenizer(t, r, p=None):
    d = _model_copy(t, r)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    return ["--model_name_or_path", str(d)]


# ------------------------------------------------------------------------------------------------ the table
# name -> (builder(t, r, prior) -> extra flags, the exact error line)

CASES = {
    # ---- settings: flags, recipes and values (parse_config, GRPOConfig.__post_init__)
    "unknown_flag": (
        lambda t, r, p: ["--num_generatoins", "4"],
        "error: unknown argument(s): --num_generatoins 4 (see --help)",
    ),
    "wrong_type": (
        lambda t, r, p: ["--num_generations", "two"],
        "error: argument --num_generations/--num-generations: invalid int value: 'two'",
    ),
    "unknown_yaml_key": (
        lambda t, r, p: _yaml(t, "learning_rat: 0.1\n"),
        "error: --config {t}/recipe.yaml: unknown config key 'learning_rat'",
    ),
    "wrong_type_in_yaml": (
        lambda t, r, p: _yaml(t, "num_generations: two\n"),
        "error: argument --num_generations/--num-generations: invalid int value: 'two'",
    ),
    "yaml_list_for_a_scalar": (
        lambda t, r, p: _yaml(t, "max_steps: [3, 4]\n"),
        "error: --config {t}/recipe.yaml: max_steps must be a single int, got a list [3, 4]",
    ),
    "invalid_yaml": (
        lambda t, r, p: _yaml(t, "max_steps: [1, 2\n"),
        "error: --config {t}/recipe.yaml: not valid YAML (line 2): expected ',' or ']', but got '<stream end>'",
    ),
    "yaml_not_a_mapping": (
        lambda t, r, p: _yaml(t, "- 1\n- 2\n"),
        "error: --config {t}/recipe.yaml: expected a mapping of field: value, got list",
    ),
    "missing_recipe": (
        lambda t, r, p: ["--config", str(t / "nope.yaml")],
        "error: --config {t}/nope.yaml: no such file",
    ),
    "G_below_2": (
        lambda t, r, p: "--num_generations 1 --per_device_train_batch_size 8".split(),
        "error: num_generations must be >= 2 (a group needs a baseline), got 1",
    ),
    "batch_not_whole_groups": (
        lambda t, r, p: ["--per_device_train_batch_size", "30"],
        "error: per_device_train_batch_size=30 is not a positive multiple of num_generations=4: each process "
        "must hold whole groups",
    ),
    "mini_batches_not_dividing": (
        lambda t, r, p: ["--num_mini_batches", "3"],
        "error: num_mini_batches=3 must divide the 8 groups per process",
    ),
    "epsilon_zero": (lambda t, r, p: ["--epsilon", "0"], "error: epsilon must be > 0, got 0.0"),
    "epsilon_high_zero": (
        lambda t, r, p: ["--epsilon_high", "0"],
        "error: epsilon_high must be > 0, got 0.0",
    ),
    "delta_too_small": (
        lambda t, r, p: ["--delta", "1.1"],
        "error: delta must be > 1 + epsilon_high, got 1.1",
    ),
    "beta_negative": (lambda t, r, p: ["--beta", "-0.1"], "error: beta must be >= 0, got -0.1"),
    "beta_inf": (lambda t, r, p: ["--beta", "inf"], "error: beta must be a finite number, got inf"),
    "learning_rate_nan": (
        lambda t, r, p: ["--learning_rate", "nan"],
        "error: learning_rate must be a finite number, got nan",
    ),
    "learning_rate_inf": (
        lambda t, r, p: ["--learning_rate", "inf"],
        "error: learning_rate must be a finite number, got inf",
    ),
    "learning_rate_zero": (
        lambda t, r, p: ["--learning_rate", "0"],
        "error: learning_rate must be > 0, got 0.0",
    ),
    "temperature_zero": (lambda t, r, p: ["--temperature", "0"], "error: temperature must be > 0, got 0.0"),
    "top_p_above_one": (lambda t, r, p: ["--top_p", "1.5"], "error: top_p must be in (0, 1], got 1.5"),
    "weight_decay_negative": (
        lambda t, r, p: ["--weight_decay", "-0.1"],
        "error: weight_decay must be >= 0, got -0.1",
    ),
    "adam_beta2_one": (lambda t, r, p: ["--adam_beta2", "1"], "error: adam_beta2 must be in [0, 1), got 1.0"),
    "max_grad_norm_negative": (
        lambda t, r, p: ["--max_grad_norm", "-1"],
        "error: max_grad_norm must be >= 0, got -1.0",
    ),
    "mixup_alpha_above_one": (
        lambda t, r, p: ["--ref_model_mixup_alpha", "1.5"],
        "error: ref_model_mixup_alpha must be in [0, 1], got 1.5",
    ),
    "seed_negative": (lambda t, r, p: ["--seed", "-1"], "error: seed must be in [0, 2**32), got -1"),
    "max_steps_zero": (lambda t, r, p: ["--max_steps", "0"], "error: max_steps must be >= 1, got 0"),
    "save_total_limit_zero": (
        lambda t, r, p: ["--save_total_limit", "0"],
        "error: save_total_limit must be >= 1, got 0",
    ),
    "unknown_loss_type": (
        lambda t, r, p: ["--loss_type", "ppo"],
        "error: loss_type='ppo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo, gmpo",
    ),
    "unknown_kl_estimator": (
        lambda t, r, p: "--kl_estimator k4 --beta 0.1".split(),
        "error: kl_estimator='k4' is not one of k1, k2, k3, full",
    ),
    "unknown_advantage_mode": (
        lambda t, r, p: ["--advantage_mode", "ppo"],
        "error: advantage_mode='ppo' is not one of grpo, rloo, reinforce, opo, pass_at_k, reinforce_pp, "
        "reinforce_pp_baseline, remax",
    ),
    "unknown_scheduler": (
        lambda t, r, p: ["--lr_scheduler_type", "step"],
        "error: lr_scheduler_type='step' is not one of constant, linear, cosine",
    ),
    "reward_weights_count": (
        lambda t, r, p: ["--reward_weights", "1", "2"],
        "error: reward_weights has 2 values for 1 reward_funcs",
    ),
    "reward_weight_inf": (
        lambda t, r, p: ["--reward_weights", "inf"],
        "error: reward_weights must be a finite number, got inf",
    ),
    "sync_ref_without_beta": (
        lambda t, r, p: ["--sync_ref_model", "true"],
        "error: sync_ref_model needs beta > 0 (with beta == 0 there is no reference)",
    ),
    # ---- settings that passed the checks and failed later, or cost without bound (issue 30, class 3): each row's
    # name says its class
    "settings/epsilon_one_under_ppo_clip": (
        lambda t, r, p: ["--epsilon", "1.0"],
        "error: epsilon must be in (0, 1) for loss_type dapo (its clip range starts at 1 - epsilon), got 1.0",
    ),
    "settings/pass_at_k_reward_not_binary": (
        lambda t, r, p: _pass_at_k(t, HALF, "half"),
        "error: seed_bank/train row 1: advantage_mode pass_at_k needs rewards of 0 or 1 (or None), but reward "
        "'half' gave 0.5 for sample 0 (completion '0<eos>')",
    ),
    "settings/pass_at_k_with_the_kl_in_the_reward": (
        lambda t, r, p: "--advantage_mode pass_at_k --train_pass_k 2 --use_kl_in_reward --beta 0.1".split(),
        "error: advantage_mode pass_at_k needs rewards of 0 or 1, and use_kl_in_reward subtracts beta x the KL "
        "from them: put the KL in the loss (use_kl_in_reward false)",
    ),
    "settings/eval_pass_k_beyond_memory": (
        lambda t, r, p: (
            "--dataset_test_split train --allow_overlapping_splits true --eval_pass_k 1000000000".split()
        ),
        "error: eval_pass_k=1000000000: 36 prompts x 1,000,000,000 samples of up to 3 tokens would need "
        "~89,585.8 GB at once (limit ~{limit}, half this machine's memory); lower eval_pass_k",
    ),
    "settings/batch_beyond_memory": (
        lambda t, r, p: ["--per_device_train_batch_size", "4000000000"],
        "error: per_device_train_batch_size=4000000000: 4,000,000,000 completions of up to 3 tokens a step "
        "would need ~51,140.8 GB at once to sample and train on (limit ~{limit}, half this machine's memory); "
        "lower per_device_train_batch_size or max_completion_length",
    ),
    "settings/explore_rounds_without_bound": (
        lambda t, r, p: ["--explore_rounds", "1000000"],
        "error: explore_rounds=1000000 and max_dynamic_sampling_rounds=3 let one step sample 1,000,004 rounds of "
        "up to 32 completions (32,000,128 completions, the cost of 1,000,004 plain steps); at most 32 rounds a "
        "step: lower explore_rounds or max_dynamic_sampling_rounds",
    ),
    "settings/explore_temperatures_never_used": (
        lambda t, r, p: "--explore_rounds 3 --explore_temperatures 2 3 4 5 6 7".split(),
        "error: explore_temperatures has 6 values [2.0, 3.0, 4.0, 5.0, 6.0, 7.0] for explore_rounds=3: the last 3 "
        "would never be used; give at most 3 (the last one repeats)",
    ),
    "settings/reward_weights_all_zero": (
        lambda t, r, p: ["--reward_weights", "0"],
        "error: reward_weights are all 0 ([0.0]): every combined reward would be 0 and the run could not learn "
        "anything; give at least one reward function a non-zero weight",
    ),
    "settings/threads_beyond_the_cores": (
        lambda t, r, p: ["--torch_num_threads", "100000"],
        "error: torch_num_threads=100000 is more than this machine's {cores} cores (threads beyond them only wait "
        "for one); use at most {cores}, or 0 for automatic",
    ),
    # ---- messages that said what is not so, or not enough (issue 30, class 5)
    "messages/reward_beyond_float32": (
        lambda t, r, p: _reward_file(t, HUGE, "huge"),
        "error: seed_bank/train row 1: reward 'huge' returned 1e+300 for sample 0 (completion '0<eos>'), which "
        "does not fit float32 (at most 3.4e+38 in size)",
    ),
    "messages/weighted_rewards_beyond_float32": (
        lambda t, r, p: [
            *_reward_file(t, "def big(completions, **kw):\n    return [3e38] * len(completions)\n", "big"),
            *"--reward_weights 2".split(),
        ],
        "error: seed_bank/train row 1: the weighted reward 2 x 'big' is 6e+38 for sample 0 (completion '0<eos>'), "
        "which does not fit float32 (at most 3.4e+38 in size)",
    ),
    "messages/no_tokenizer": (
        _no_tokenizer,
        "error: model_name_or_path={t}/model: no tokenizer there (missing tokenizer.json, the tokenizer's "
        "vocabulary); save the tokenizer beside the model (tokenizer.save_pretrained)",
    ),
    # ---- the output directory
    "output_dir_is_a_file": (
        lambda t, r, p: _file_at(t, "out"),
        "error: output_dir {out} exists and is not a directory",
    ),
    "output_dir_under_a_file": (
        lambda t, r, p: [*_file_at(t, "afile"), "--output_dir", str(t / "afile" / "out")],
        "error: output_dir {t}/afile/out is not writable: Not a directory",
    ),
    "output_dir_holds_a_run": (
        lambda t, r, p: _earlier_run(t, p),
        "error: output_dir {out} already holds a run; pass --overwrite_output_dir to replace it, "
        "--resume_from_checkpoint latest to continue it, or choose another --output_dir",
    ),
    "output_dir_in_use": (
        _locked,
        "error: output_dir {out} is in use by another run (pid {pid}); wait for it to finish or choose another "
        "--output_dir",
    ),
    # ---- class 1 (issue 30): a run writes into its own inputs (checked by real paths, before anything is written)
    "output_dir_is_the_model": (
        lambda t, r, p: ["--model_name_or_path", str(_model_copy(t, r)), "--output_dir", f"{t}/model/"],
        "error: output_dir {t}/model is model_name_or_path {t}/model: a run never writes where it reads; choose "
        "another --output_dir",
    ),
    "output_dir_inside_the_model": (
        lambda t, r, p: [
            "--model_name_or_path",
            str(_model_copy(t, r)),
            "--output_dir",
            str(t / "model" / "o"),
        ],
        "error: output_dir {t}/model/o is inside model_name_or_path {t}/model: a run never writes where it reads; "
        "choose another --output_dir",
    ),
    "output_dir_a_symlink_to_the_model": (
        lambda t, r, p: [
            *["--model_name_or_path", str(_model_copy(t, r))],
            *["--output_dir", str(_symlink(t, "link", t / "model"))],
        ],
        "error: output_dir {t}/link is model_name_or_path {t}/model (both are {rt}/model): a run never writes "
        "where it reads; choose another --output_dir",
    ),
    "output_dir_is_the_reference": (
        lambda t, r, p: [
            *["--beta", "0.1", "--ref_model_name_or_path", str(_model_copy(t, r))],
            *["--output_dir", str(t / "model")],
        ],
        "error: output_dir {t}/model is ref_model_name_or_path {t}/model: a run never writes where it reads; "
        "choose another --output_dir",
    ),
    "model_inside_output_dir": (  # continuing from the last run's final/ into the same output_dir
        lambda t, r, p: ["--model_name_or_path", str(shutil.copytree(r, t / "out" / "final"))],
        "error: model_name_or_path {out}/final is inside output_dir {out}: a run never writes where it reads; "
        "choose another --output_dir",
    ),
    "output_dir_is_the_dataset": (
        lambda t, r, p: [*_dataset(t, GOOD), "--output_dir", str(t / "ds")],
        "error: output_dir {t}/ds is dataset {t}/ds: a run never writes where it reads; choose another "
        "--output_dir",
    ),
    "output_dir_is_a_named_dataset": (  # (data/seed_bank: the name resolves there)
        lambda t, r, p: ["--output_dir", str(DATA_DIR / "seed_bank")],
        "error: output_dir {data}/seed_bank is dataset seed_bank (both are {data}/seed_bank): a run never writes "
        "where it reads; choose another --output_dir",
    ),
    "dataset_inside_output_dir": (
        lambda t, r, p: [
            "--dataset_name",
            str(_in_dir(t, "out/ds", "train.jsonl", GOOD).parent),
            "--dataset_test_split",
            "",
        ],
        "error: dataset {out}/ds is inside output_dir {out}: a run never writes where it reads; choose another "
        "--output_dir",
    ),
    "output_dir_is_a_reward_files_directory": (
        lambda t, r, p: [
            *["--reward_funcs", f"{_in_dir(t, 'rw', 'r.py', NO_REWARD)}:f"],
            *["--output_dir", str(t / "rw")],
        ],
        "error: output_dir {t}/rw is the directory of reward_funcs {t}/rw/r.py: a run never writes where it "
        "reads; choose another --output_dir",
    ),
    "output_dir_is_the_recipes_directory": (
        lambda t, r, p: [
            *["--config", str(_in_dir(t, "recipes", "r.yaml", "max_steps: 2\n"))],
            *["--output_dir", str(t / "recipes")],
        ],
        "error: output_dir {t}/recipes is the directory of --config {t}/recipes/r.yaml: a run never writes where "
        "it reads; choose another --output_dir",
    ),
    # ---- the data
    "unknown_dataset": (
        lambda t, r, p: ["--dataset_name", str(t / "nope")],
        "error: dataset '{t}/nope': no such directory (known names: addition, addition_long, addition_long_padded, chain_sum, countdown, guess_number, multiplication, reverse, seed_bank, reasoning_gym_NAME; "
        "or a directory of "
        "<split>.jsonl files)",
    ),
    "unknown_split": (
        lambda t, r, p: ["--dataset_train_split", "validation"],
        "error: dataset 'seed_bank' has no split 'validation' (it has: train)",
    ),
    "no_split_files": (
        lambda t, r, p: _dataset(t, None),
        "error: dataset '{t}/ds': no <split>.jsonl files in {t}/ds",
    ),
    "empty_split": (lambda t, r, p: _dataset(t, ""), "error: {t}/ds/train.jsonl: no rows (an empty split)"),
    "malformed_json_line": (
        lambda t, r, p: _dataset(t, GOOD + '{"prompt": "1+3=", "answer": "4"\n'),
        "error: {t}/ds/train.jsonl line 3: not valid JSON (Expecting ',' delimiter, column 33)",
    ),
    "line_not_an_object": (
        lambda t, r, p: _dataset(t, GOOD + "[1, 2]\n"),
        "error: {t}/ds/train.jsonl line 3: expected a JSON object, got a list",
    ),
    "prompt_null": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": None, "answer": "3"})),
        "error: {t}/ds/train.jsonl line 3: field 'prompt' must be a non-empty string, got None",
    ),
    "prompt_empty": (
        lambda t, r, p: _dataset(t, _rows({"prompt": "", "answer": "3"})),
        "error: {t}/ds/train.jsonl line 1: field 'prompt' must be a non-empty string, got ''",
    ),
    "prompt_not_a_string": (
        lambda t, r, p: _dataset(t, _rows({"prompt": 12, "answer": "3"})),
        "error: {t}/ds/train.jsonl line 1: field 'prompt' must be a non-empty string, got 12",
    ),
    "row_missing_a_field": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": "1+3="})),
        "error: {t}/ds/train.jsonl line 3: has no field 'answer' that the first row does not",
    ),
    "row_with_an_extra_field": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": "1+3=", "answer": "4", "note": "x"})),
        "error: {t}/ds/train.jsonl line 3: has a field 'note' that the first row does not",
    ),
    "column_changes_type": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": "1+3=", "answer": 4})),
        "error: {t}/ds/train.jsonl line 3: field 'answer' is a number, earlier rows have a string",
    ),
    "split_missing_a_column": (
        lambda t, r, p: _dataset(t, GOOD, _rows({"prompt": "1+1="})),
        "error: {t}/ds/test.jsonl: split 'test' has no column 'answer', which split 'train' has",
    ),
    "not_utf8": (
        lambda t, r, p: _dataset(t, GOOD.encode() + b'{"prompt": "1+1=\xff", "answer": "2"}\n'),
        "error: {t}/ds/train.jsonl: not UTF-8 text (invalid start byte at byte 84)",
    ),
    "no_prompt_column": (
        lambda t, r, p: _dataset(t, _rows({"question": "1+2=", "answer": "3"})),
        "error: dataset '{t}/ds' split 'train' has no 'prompt' column (columns: question, answer)",
    ),
    "no_answer_column": (
        lambda t, r, p: _dataset(t, _rows({"prompt": "1+2="})),
        "error: {t}/ds/train row 1: reward 'accuracy' needs argument 'answer', which is neither a standard "
        "argument (prompts, completions, completion_ids) nor a dataset column or trainer keyword (available: "
        "eos, max_completion_length)",
    ),
    "answer_not_an_integer": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": "1+1=", "answer": "two"})),
        "error: {t}/ds/train row 3: reward 'accuracy' raised ValueError: gold answer 'two' is not an integer",
    ),
    "eval_answer_not_an_integer": (
        lambda t, r, p: _dataset(
            t, GOOD, _rows({"prompt": "1+1=", "answer": "2"}, {"prompt": "1+0=", "answer": "1."})
        ),
        "error: {t}/ds/test row 2: reward 'accuracy' raised ValueError: gold answer '1.' is not an integer; "
        "'accuracy' decides held-out accuracy: choose the rule that reads this data's answers with --eval_reward NAME",
    ),
    "char_outside_vocab": (
        lambda t, r, p: _dataset(t, GOOD + _rows({"prompt": "3*4=", "answer": "12"})),
        "error: train dataset row 3: prompt '3*4=' has character '*' outside the tokenizer's vocabulary "
        "'+0123456789='",
    ),
    "eval_char_outside_vocab": (
        lambda t, r, p: _dataset(t, GOOD, _rows({"prompt": "3 + 4=", "answer": "7"})),
        "error: eval dataset row 1: prompt '3 + 4=' has character ' ' outside the tokenizer's vocabulary "
        "'+0123456789='",
    ),
    "longer_than_context": (
        lambda t, r, p: ["--max_completion_length", "100"],
        "error: train prompts of 4 tokens + max_completion_length=100 exceed the model's context of 16 positions",
    ),
    # ---- the model and the tokenizer
    "missing_model_dir": (
        lambda t, r, p: ["--model_name_or_path", str(t / "missing")],
        "error: model_name_or_path={t}/missing: no model there (missing config.json)",
    ),
    "truncated_weights": (
        _truncated_weights,
        # (the last words are safetensors', and differ between its versions)
        "error: model_name_or_path={t}/model: cannot load the model: Error while deserializing header: {msg}",
    ),
    "garbage_config": (
        lambda t, r, p: _config(t, r, "{ this is not json"),
        "error: model_name_or_path={t}/model: cannot load the model: It looks like the config file at "
        "'{t}/model/config.json' is not a valid JSON file.",
    ),
    "weights_missing_a_tensor": (
        lambda t, r, p: _weights_edit(t, r, _drop_ln_f),
        "error: model_name_or_path={t}/model: the weights do not match the TinyLMForCausalLM architecture "
        "(1 missing keys, e.g. transformer.ln_f.weight)",
    ),
    "nan_weight": (
        lambda t, r, p: _weights_edit(t, r, _nan_in_ln_f),
        "error: model_name_or_path={t}/model: weight transformer.ln_f.weight holds NaN or infinite values",
    ),
    "wrong_architecture": (
        _bert,
        # (how many keys a BERT has depends on the transformers version)
        "error: model_name_or_path={t}/model: the weights do not match the BertLMHeadModel architecture "
        "({n} missing keys, e.g. bert.embeddings.LayerNorm.bias)",
    ),
    "tokenizer_vocab_mismatch": (
        _tokenizer_mismatch,
        "error: tokenizer has 17 tokens but the model's vocabulary has 14",
    ),
    "missing_reference": (
        lambda t, r, p: ["--beta", "0.1", "--ref_model_name_or_path", str(t / "nowhere")],
        "error: ref_model_name_or_path={t}/nowhere: no model there (missing config.json)",
    ),
    # ---- the reward functions
    "unknown_reward": (
        lambda t, r, p: ["--reward_funcs", "acuracy"],
        "error: unknown reward 'acuracy'; registered: accuracy, accuracy_lenient, countdown, countdown_partial, "
        "digit_match, exact_match, final_answer, format, guess_found, guess_turns, length_penalty, reasoning_gym, "
        "reasoning_gym_final_answer, "
        "reversed_answer, tool_answer (or use "
        "'package.module:function' / 'path/to/file.py:function')",
    ),
    "missing_reward_file": (
        lambda t, r, p: ["--reward_funcs", f"{t}/nope.py:f"],
        "error: reward file '{t}/nope.py' not found (spec '{t}/nope.py:f')",
    ),
    "reward_raises": (
        lambda t, r, p: _reward_file(
            t, "def boom(completions, **kw):\n    raise RuntimeError('kaboom')\n", "boom"
        ),
        "error: seed_bank/train row 1: reward 'boom' raised RuntimeError: kaboom",
    ),
    "no_such_function_in_file": (
        lambda t, r, p: _reward_file(t, "def f(completions):\n    return []\n", "g"),
        "error: file '{t}/myreward.py' has no function 'g' (callables there: f)",
    ),
    "reward_file_syntax_error": (
        lambda t, r, p: _reward_file(t, "def f(completions:\n", "f"),
        "error: cannot load reward file '{t}/myreward.py': SyntaxError: '(' was never closed (myreward.py, line 1)",
    ),
    "reward_returns_wrong_length": (
        lambda t, r, p: _reward_file(t, "def f(completions, **kw):\n    return [1.0]\n", "f"),
        "error: seed_bank/train: reward 'f' returned 1 values for 36 samples",
    ),
    "reward_returns_a_string": (
        lambda t, r, p: _reward_file(
            t, "def f(completions, **kw):\n    return ['good'] * len(completions)\n", "f"
        ),
        "error: seed_bank/train row 1: reward 'f' returned non-number 'good' (str) for sample 0 (completion "
        "'0<eos>')",
    ),
    # ---- resuming
    "resume_from_nowhere": (
        lambda t, r, p: ["--resume_from_checkpoint", str(t / "nowhere")],
        "error: resume_from_checkpoint={t}/nowhere: not a checkpoint directory (no trainer_state.json)",
    ),
    "resume_latest_without_checkpoints": (
        lambda t, r, p: ["--resume_from_checkpoint", "latest"],
        "error: resume_from_checkpoint=latest: no complete checkpoint in {out}",
    ),
    "resume_true_without_checkpoints": (
        lambda t, r, p: ["--resume_from_checkpoint", "true"],
        "error: resume_from_checkpoint=true: no complete checkpoint in {out}",
    ),
    "resume_with_another_learning_rate": (
        lambda t, r, p: _earlier_run(t, p, *"--resume_from_checkpoint latest --learning_rate 0.01".split()),
        "error: resume_from_checkpoint: {out}/checkpoint-2 was trained with other settings (learning_rate 0.002 "
        "-> 0.01); resume with the same values, or start a new run in another --output_dir",
    ),
    "resume_with_another_G": (
        lambda t, r, p: _earlier_run(
            t,
            p,
            *"--resume_from_checkpoint latest --num_generations 8 --per_device_train_batch_size 32".split(),
        ),
        "error: resume_from_checkpoint: {out}/checkpoint-2 was trained with other settings (num_generations 4 -> "
        "8); resume with the same values, or start a new run in another --output_dir",
    ),
    "resume_longer_with_a_decaying_schedule": (
        lambda t, r, p: _earlier_run(t, p, *"--resume_from_checkpoint latest --max_steps 4".split()),
        "error: resume_from_checkpoint: {out}/checkpoint-2 was trained with other settings (max_steps 2 -> 4); "
        "resume with the same values, or start a new run in another --output_dir",
    ),
    "resume_from_a_damaged_checkpoint": (
        lambda t, r, p: _damage(t, p, [2], "--resume_from_checkpoint", str(t / "out" / "checkpoint-2")),
        "error: resume_from_checkpoint={out}/checkpoint-2: model.safetensors has {size_2} bytes, the manifest says "
        "{size_2_full}",
    ),
    "resume_latest_all_damaged": (
        lambda t, r, p: _damage(t, p, [1, 2], "--resume_from_checkpoint", "latest"),
        "error: resume_from_checkpoint=latest: no complete checkpoint in {out} that verifies",
    ),
}


# What a message says of this machine: its memory budget and its cores.
MACHINE = {"limit": gigabytes(memory_budget()), "cores": os.cpu_count()}


@pytest.fixture(scope="module")
def prior_run(seed_reference, tmp_path_factory) -> Path:
    """A finished 2-step run with checkpoints at steps 1 and 2."""
    out = tmp_path_factory.mktemp("prior") / "run"
    argv = cli(seed_reference, out, *"--max_steps 2 --save_steps 1 --dataset_test_split".split(), "")
    assert train_grpo.main(argv) == 0
    return out


def _rc(argv: list[str]):
    try:
        return train_grpo.main(argv)
    except SystemExit as e:  # (argparse's own exits would land here: there must be none)
        return f"SystemExit({e.code!r})"


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_exact_error_line_and_changes_nothing(
    name, seed_reference, prior_run, tmp_path, capfd
):
    build, expected = CASES[name]
    t, out = tmp_path, tmp_path / "out"
    extra = build(t, seed_reference, prior_run)
    before = {**snapshot(t), **{f"ref/{k}": v for k, v in snapshot(Path(seed_reference)).items()}}
    capfd.readouterr()
    try:
        rc = _rc(cli(seed_reference, out, *"--max_steps 2 --dataset_test_split".split(), "", *extra))
    finally:
        if name == "output_dir_in_use":
            os.close(_locked.fd)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    size = len(prior_run.joinpath("checkpoint-2", "model.safetensors").read_bytes())
    sizes = {"size_2": f"{size - 10:,}", "size_2_full": f"{size:,}"}
    where = {"rt": os.path.realpath(t), "data": DATA_DIR}
    want = expected.format(
        t=t, r=seed_reference, out=out, pid=os.getpid(), n="{n}", msg="{msg}", **sizes, **MACHINE, **where
    )
    pattern = re.escape(want).replace(re.escape("{n}"), r"\d+").replace(re.escape("{msg}"), r"\S.*")
    assert rc == 1, (rc, err)
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), lines
    after = {**snapshot(t), **{f"ref/{k}": v for k, v in snapshot(Path(seed_reference)).items()}}
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert changed == []  # nothing the user had was changed or removed
    assert (out / "metrics.jsonl").exists() == ("out/metrics.jsonl" in before)  # and no training happened


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wrong_type", "malformed_json_line"])
def test_bad_input_from_a_real_process(name, seed_reference, prior_run, tmp_path):
    build, expected = CASES[name]
    out = tmp_path / "out"
    argv = cli(
        seed_reference,
        out,
        *"--max_steps 2 --dataset_test_split".split(),
        "",
        *build(tmp_path, seed_reference, prior_run),
    )
    cmd = [sys.executable, "train_grpo.py", *argv]
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [expected.format(t=tmp_path, out=out)]
    assert proc.stdout == ""


def test_there_are_sixty_cases_at_least():
    assert len(CASES) >= 60


# ------------------------------------------------------------------------------------------------ failing mid-run
# Rows whose input passes every start-up check and fails once training has started (what the start-up probe cannot
# see: a reward that misbehaves only on sampled completions, or only later): one exact line, rc 1, no final model.
# A reward that changes once checkpoint-1 exists fails at step 2, with a checkpoint to resume from.


def _after_checkpoint(t: Path, then: str, before: str) -> str:
    return f"import os\ndef f(completions, **kw):\n    n = len(completions)\n    if os.path.isdir({str(t / 'out' / 'checkpoint-1')!r}):\n        return {then}\n    return {before}\n"


HALF_WRONG = "def half(completions, answer, **kw):\n    return [1.0 if c == a + '<eos>' else 0.5 for c, a in zip(completions, answer)]\n"
FLAKY = "def flaky(completions, answer, **kw):\n    if any(c != a + '<eos>' for c, a in zip(completions, answer)):\n        raise RuntimeError('cannot score that')\n    return [1.0] * len(completions)\n"
BIG = "[3e38 if i % 2 else 1e38 for i in range(n)]"  # advantage_mode reinforce + dapo: the loss overflows to -inf
REINFORCE = "--advantage_mode reinforce --dynamic_sampling false".split()

RUN_CASES = {
    "settings/pass_at_k_reward_not_binary_mid_run": (
        lambda t: _pass_at_k(t, HALF_WRONG, "half"),
        "error: step 1: advantage_mode pass_at_k needs rewards of 0 or 1 (or None), but reward 'half' gave 0.5 for "
        "sample {n} (completion {msg}); there is no checkpoint to resume from",
    ),
    "messages/reward_raises_mid_run": (
        lambda t: _reward_file(t, FLAKY, "flaky"),
        "error: step 1: reward 'flaky' raised RuntimeError: cannot score that; there is no checkpoint to resume from",
    ),
    "messages/reward_raises_after_a_checkpoint": (
        lambda t: [
            *_reward_file(t, _after_checkpoint(t, "1 / 0", "[float(i % 2) for i in range(n)]"), "f"),
            *"--save_steps 1".split(),
        ],
        "error: step 2: reward 'f' raised ZeroDivisionError: division by zero; the last complete checkpoint is "
        "{out}/checkpoint-1, to resume from with --resume_from_checkpoint latest",
    ),
    "messages/reward_beyond_float32_mid_run": (
        lambda t: [
            *_reward_file(t, _after_checkpoint(t, "[-1e300] * n", "[0.0] * n"), "f"),
            "--save_steps",
            "1",
        ],
        "error: step 2: reward 'f' returned -1e+300 for sample 0 (completion {msg}), which does not fit float32 (at "
        "most 3.4e+38 in size); the last complete checkpoint is {out}/checkpoint-1, to resume from with "
        "--resume_from_checkpoint latest",
    ),
    "messages/nonfinite_loss_without_a_checkpoint": (
        lambda t: [
            *_reward_file(t, f"def f(completions, **kw):\n    n = len(completions)\n    return {BIG}\n", "f"),
            *REINFORCE,
        ],
        "error: step 1: the loss is NaN or infinite; stopped (there is no checkpoint to resume from; "
        "on_nonfinite=skip skips such steps instead)",
    ),
    "messages/nonfinite_loss_after_a_checkpoint": (
        lambda t: [
            *_reward_file(t, _after_checkpoint(t, BIG, "[float(i % 2) for i in range(n)]"), "f"),
            *REINFORCE,
            *"--save_steps 1".split(),
        ],
        "error: step 2: the loss is NaN or infinite; stopped (the last complete checkpoint is {out}/checkpoint-1, "
        "to resume from with --resume_from_checkpoint latest; "
        "on_nonfinite=skip skips such steps instead)",
    ),
    "messages/every_step_skipped": (
        lambda t: [
            *_reward_file(t, f"def f(completions, **kw):\n    n = len(completions)\n    return {BIG}\n", "f"),
            *REINFORCE,
            *"--on_nonfinite skip".split(),
        ],
        "error: on_nonfinite=skip skipped every one of the 2 steps (each had a NaN or infinite loss or gradient): "
        "the run learned nothing (there is no checkpoint to resume from)",
    ),
}


@pytest.mark.parametrize("name", list(RUN_CASES))
def test_a_failure_mid_run_is_one_exact_error_line(name, seed_reference, tmp_path, capfd):
    build, expected = RUN_CASES[name]
    out = tmp_path / "out"
    capfd.readouterr()
    # (no signal forecast: its samples, before step 1, would meet the failure first; FORECAST_CASES test that)
    argv = [*"--max_steps 2 --signal_forecast_prompts 0 --dataset_test_split".split(), "", *build(tmp_path)]
    rc = _rc(cli(seed_reference, out, *argv))
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    want = re.escape(expected.format(t=tmp_path, out=out, n="{n}", msg="{msg}"))
    pattern = want.replace(re.escape("{n}"), r"\d+").replace(re.escape("{msg}"), r"'\S.*'")
    assert rc == 1, (rc, lines)
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), lines
    assert not (out / "final").exists()


FORECAST_CASES = {
    # A reward that fails on the first samples it sees fails in the signal forecast, before step 1, as step 1 would.
    "reward_not_binary": (
        lambda t: _pass_at_k(t, HALF_WRONG, "half"),
        "error: before the first step (the signal forecast): advantage_mode pass_at_k needs rewards of 0 or 1 (or "
        "None), but reward 'half' gave 0.5 for sample {n} (completion {msg}); there is no checkpoint to resume from",
    ),
    "reward_raises": (
        lambda t: _reward_file(t, FLAKY, "flaky"),
        "error: before the first step (the signal forecast): reward 'flaky' raised RuntimeError: cannot score that; "
        "there is no checkpoint to resume from",
    ),
    "reward_always_none": (
        lambda t: _reward_file(
            t, "def none(completions, **kw):\n    return [None] * len(completions)\n", "none"
        ),
        "error: no reward function applies to any of the {n} samples (every reward is None): nothing to learn from; "
        "check the reward functions (none) and the dataset's columns",
    ),
}


@pytest.mark.parametrize("name", sorted(FORECAST_CASES))
def test_a_reward_that_fails_in_the_signal_forecast_is_one_exact_error_line(
    name, seed_reference, tmp_path, capfd
):
    build, expected = FORECAST_CASES[name]
    out = tmp_path / "out"
    capfd.readouterr()
    rc = _rc(cli(seed_reference, out, *"--max_steps 2 --dataset_test_split".split(), "", *build(tmp_path)))
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    pattern = re.escape(expected).replace(re.escape("{n}"), r"\d+").replace(re.escape("{msg}"), r"'\S.*'")
    assert rc == 1, (rc, lines)
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), lines
    assert not (out / "final").exists() and not list(out.glob("checkpoint-*"))


@pytest.mark.slow
def test_a_run_that_skips_some_steps_says_how_many(seed_reference, tmp_path, capfd):
    body = _after_checkpoint(tmp_path, BIG, "[float(i % 2) for i in range(n)]")
    extra = [*_reward_file(tmp_path, body, "f"), *REINFORCE, *"--save_steps 1 --on_nonfinite skip".split()]
    capfd.readouterr()
    rc = _rc(
        cli(
            seed_reference,
            tmp_path / "out",
            *"--max_steps 2 --dataset_test_split train --allow_overlapping_splits true".split(),
            *extra,
        )
    )
    captured = capfd.readouterr()
    assert rc == 0, captured.err
    lines = captured.out.splitlines()
    assert "on_nonfinite=skip: 1 of 2 steps were skipped (a NaN or infinite loss or gradient)" in lines
    assert any(line.endswith(", 1 steps skipped for a NaN or infinite loss)") for line in lines), lines


# ------------------------------------------------------------------------------------------------ train_sft.py
# The SFT entry point shares GRPO's validation path (tinygrpo.base.options.check_options) and its non-finite guard:
# every bad setting is one exact line, rc 1, and no model is saved.

SFT = (
    "--dataset_name seed_bank --train_size 0 --max_steps 5 --per_device_train_batch_size 8 --n_embd 16 --n_head 2 --n_positions 16 "
    "--logging_steps 0 --torch_num_threads 1"
).split()

SFT_CASES = {
    "sft/learning_rate_inf": (
        ["--learning_rate", "inf"],
        "error: learning_rate must be a finite number, got inf",
    ),
    "sft/learning_rate_too_large": (
        ["--learning_rate", "1e6"],
        "error: step {n}: the loss is NaN or infinite (learning_rate=1000000.0 too large?); stopped, nothing saved",
    ),
    "sft/label_smoothing_above_one": (
        ["--label_smoothing_factor", "1.5"],
        "error: label_smoothing_factor must be in [0, 1], got 1.5",
    ),
    "sft/threads_negative": (["--torch_num_threads", "-1"], "error: torch_num_threads must be >= 0, got -1"),
    "sft/threads_beyond_the_cores": (
        ["--torch_num_threads", "100000"],
        "error: torch_num_threads=100000 is more than this machine's {cores} cores (threads beyond them only wait for one); "
        "use at most {cores}, or 0 for automatic",
    ),
    "sft/seed_negative": (["--seed", "-1"], "error: seed must be in [0, 2**32), got -1"),
    "sft/model_beyond_memory": (
        ["--n_embd", "1000000"],
        "error: n_layer=2, n_embd=1000000, n_positions=16 (24,000,058,000,000 parameters) and per_device_train_batch_size=8 "
        "x 7 "
        "tokens would need ~357,635.4 GB at once to train (limit ~{limit}, half this machine's memory); lower them",
    ),
}


@pytest.mark.parametrize("name", list(SFT_CASES))
def test_sft_bad_input_is_one_exact_error_line_and_saves_nothing(name, tmp_path, capfd):
    extra, expected = SFT_CASES[name]
    out = tmp_path / "sft"
    capfd.readouterr()
    rc = train_sft.main([*SFT, "--output_dir", str(out), "--dataset_test_split", "", *extra])
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    pattern = re.escape(expected.format(n="{n}", **MACHINE)).replace(re.escape("{n}"), r"\d+")
    assert rc == 1, (rc, lines)
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), lines
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
