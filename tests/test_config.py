"""GRPOConfig / parse_config: flags, YAML recipes (flags win), lists, booleans, help texts, and the one-line errors
that bad values raise, each naming the field."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import train_grpo
from tinygrpo.config import ConfigError, GRPOConfig, _Parser, parse_config

REPO = Path(train_grpo.__file__).resolve().parent


def write(tmp_path: Path, text: str | bytes, name: str = "recipe.yaml") -> str:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return str(p)


# ------------------------------------------------------------------------------------------------ parsing


def test_defaults_and_flags():
    cfg = parse_config([])
    assert cfg == GRPOConfig()
    cfg = parse_config(
        "--num_generations 4 --per_device_train_batch_size 32 --beta 0.04 --loss_type grpo --epsilon_high 0.28 --output_dir x/y".split()
    )
    assert (cfg.num_generations, cfg.per_device_train_batch_size, cfg.beta) == (4, 32, 0.04)
    assert (cfg.loss_type, cfg.epsilon_high, cfg.output_dir) == ("grpo", 0.28, "x/y")
    assert isinstance(cfg.beta, float) and isinstance(cfg.num_generations, int)
    assert cfg.needs_old_logps is False
    assert parse_config(["--num_iterations", "2"]).needs_old_logps is True
    assert (
        parse_config(
            [*"--per_device_train_batch_size 32 --num_generations 4 --num_mini_batches 2".split()]
        ).needs_old_logps
        is True
    )


def test_list_fields():
    cfg = parse_config([*"--reward_funcs accuracy format --reward_weights 1.0 0.1".split()])
    assert cfg.reward_funcs == ["accuracy", "format"]
    assert cfg.reward_weights == [1.0, 0.1]
    assert parse_config([]).reward_funcs == ["accuracy"] and parse_config([]).reward_weights is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--make_plots", "false"], False),
        (["--make_plots", "False"], False),
        (["--make_plots", "no"], False),
        (["--make_plots", "true"], True),
        (["--disable_tqdm"], True),  # a bare flag means true
    ],
)
def test_booleans(argv, expected):
    name = argv[0][2:]
    assert getattr(parse_config(argv), name) is expected


def test_yaml_recipe_with_flags_overriding_it(tmp_path):
    path = write(
        tmp_path,
        "num_generations: 4\nper_device_train_batch_size: 64\nbeta: 0.02\nloss_type: bnpo\n"
        "reward_funcs: [accuracy, format]\nreward_weights: [1.0, 0.1]\nmake_plots: false\n"
        "epsilon_high: null\n",
    )
    cfg = parse_config(["--config", path])
    assert (cfg.num_generations, cfg.per_device_train_batch_size, cfg.beta, cfg.loss_type) == (
        4,
        64,
        0.02,
        "bnpo",
    )
    assert cfg.reward_funcs == ["accuracy", "format"] and cfg.reward_weights == [1.0, 0.1]
    assert cfg.make_plots is False and cfg.epsilon_high is None
    # flags override the file wherever --config appears
    for argv in (
        ["--config", path, *"--beta 0.1 --make_plots true".split()],
        [*"--beta 0.1 --make_plots true --config".split(), path],
    ):
        cfg = parse_config(argv)
        assert cfg.beta == 0.1 and cfg.make_plots is True
        assert cfg.loss_type == "bnpo" and cfg.num_generations == 4  # the rest still from the file
    # a list flag replaces the file's list
    cfg = parse_config(["--config", path, *"--reward_funcs accuracy --reward_weights 2.0".split()])
    assert cfg.reward_funcs == ["accuracy"] and cfg.reward_weights == [2.0]
    # an empty file is no change
    assert parse_config(["--config", write(tmp_path, "", "empty.yaml")]) == GRPOConfig()


def test_every_field_has_help_text():
    missing = [f.name for f in fields(GRPOConfig) if not str(f.metadata.get("help", "")).strip()]
    assert missing == []
    text = _Parser(GRPOConfig).format_help()
    for f in fields(GRPOConfig):
        assert f"--{f.name}" in text, f.name


# ------------------------------------------------------------------------------------------------ bad values


def _bad_yaml_cases():
    # (id, file content, expected words in the message)
    return [
        (
            "unknown_yaml_key",
            "learning_rat: 0.1\n",
            r"unknown config key 'learning_rat'",
        ),  # a typo in a recipe
        ("unreadable_yaml", "beta: [0.1, 0.2\n", r"not valid YAML"),  # broken syntax
        ("yaml_is_a_list", "- beta\n- 0.1\n", r"expected a mapping"),  # a list, not field: value
        (
            "yaml_nested_mapping",
            "beta: {value: 0.1}\n",
            r"beta must be a scalar or a list",
        ),  # a mapping value
        ("yaml_bad_value", "top_p: 1.5\n", r"top_p"),  # a file value goes through the same checks as a flag
    ]


BAD_FLAGS = [
    # num_generations = 1: a group of one has no baseline
    pytest.param(["--num_generations", "1"], "num_generations", id="num_generations=1"),
    # 30 completions per process do not split into groups of 8
    pytest.param(
        [*"--num_generations 8 --per_device_train_batch_size 30".split()],
        "per_device_train_batch_size",
        id="batch_not_multiple_of_G",
    ),
    # epsilon must be > 0 (0 and negatives)
    pytest.param(["--epsilon", "0"], "epsilon", id="epsilon=0"),
    pytest.param(["--epsilon", "-0.1"], "epsilon", id="epsilon<0"),
    # beta < 0 would push AWAY from the reference
    pytest.param(["--beta", "-0.01"], "beta", id="beta<0"),
    # unknown names of the choice fields
    pytest.param(["--loss_type", "ppo"], "loss_type", id="unknown_loss_type"),
    pytest.param(["--kl_estimator", "k4"], "kl_estimator", id="unknown_kl_estimator"),
    pytest.param(["--advantage_mode", "gae"], "advantage_mode", id="unknown_advantage_mode"),
    pytest.param(["--scale_rewards", "true"], "scale_rewards", id="unknown_scale_rewards"),
    pytest.param(
        ["--importance_sampling_level", "batch"], "importance_sampling_level", id="unknown_is_level"
    ),
    pytest.param(
        ["--lr_scheduler_type", "cosine_with_restarts"], "lr_scheduler_type", id="unknown_scheduler"
    ),
    # temperature must be > 0 (0 would be greedy, and log-probs divide by it)
    pytest.param(["--temperature", "0"], "temperature", id="temperature=0"),
    # top_p is a probability mass in (0, 1]
    pytest.param(["--top_p", "1.01"], "top_p", id="top_p>1"),
    pytest.param(["--top_p", "0"], "top_p", id="top_p=0"),
    # delta must exceed 1 + epsilon_high (here 1.2), else it clips inside the trust region
    pytest.param(["--delta", "1.1"], "delta", id="delta_too_small"),
    # one weight per reward function
    pytest.param(
        [*"--reward_funcs accuracy format --reward_weights 1.0".split()],
        "reward_weights",
        id="reward_weights_count",
    ),
    # a flag that is not a field
    pytest.param(["--no_such_flag", "4"], "--no_such_flag", id="unknown_flag"),
    # --config without a path, and with a path that does not exist
    pytest.param(["--config"], "--config", id="config_without_path"),
    pytest.param(
        ["--config", "no/such/recipe.yaml"],
        "--config no/such/recipe.yaml: no such file",
        id="config_missing_file",
    ),
    # other range checks
    pytest.param(["--max_steps", "0"], "max_steps", id="max_steps=0"),
    pytest.param(
        [*"--per_device_train_batch_size 32 --num_generations 4 --num_mini_batches 3".split()],
        "num_mini_batches",
        id="mini_batches_do_not_divide_groups",
    ),
    pytest.param(["--sync_ref_model", "true"], "sync_ref_model", id="sync_ref_without_beta"),
    pytest.param(["--report_to", "wandb"], "report_to", id="unknown_report_to"),
]


@pytest.mark.parametrize(("argv", "field_name"), BAD_FLAGS)
def test_bad_flag_raises_config_error_naming_the_field(argv, field_name):
    with pytest.raises(ConfigError) as e:
        parse_config(argv)
    assert field_name in str(e.value)
    assert "\n" not in str(e.value)  # one line


@pytest.mark.parametrize(
    ("case", "text", "pattern"), _bad_yaml_cases(), ids=[c[0] for c in _bad_yaml_cases()]
)
def test_bad_yaml_raises_config_error(tmp_path, case, text, pattern):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=pattern) as e:
        parse_config(["--config", path])
    assert "\n" not in str(e.value)
    if case != "yaml_bad_value":
        assert path in str(e.value)  # says which file


def test_empty_reward_funcs_raises_config_error():
    # (on the command line, "--reward_funcs" with no value is rejected by argparse itself: nargs="+")
    with pytest.raises(ConfigError, match="reward_funcs"):
        GRPOConfig(reward_funcs=[])


def test_non_utf8_yaml_raises_config_error(tmp_path):
    path = write(tmp_path, b"\xff\xfebeta: 0.1\n")
    with pytest.raises(ConfigError, match="--config"):
        parse_config(["--config", path])


@pytest.mark.parametrize("how", ["flag_None", "yaml_null"])
def test_eval_split_none_disables_evaluation(tmp_path, how):
    argv = (
        ["--eval_split", "None"]
        if how == "flag_None"
        else ["--config", write(tmp_path, "eval_split: null\n")]
    )
    assert parse_config(argv).eval_split is None


@pytest.mark.parametrize("argv", [["--num_generation", "4"], ["--learning", "0.1"]])
def test_abbreviated_flag_is_unknown(argv):
    with pytest.raises(ConfigError, match=argv[0]):
        parse_config(argv)


def test_eval_split_empty_string_disables_evaluation():
    assert parse_config(["--eval_split", ""]).eval_split is None


def test_cli_error_is_one_line_without_traceback():
    proc = subprocess.run(
        [sys.executable, "train_grpo.py", "--num_generations", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and "num_generations" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
