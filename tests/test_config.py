"""GRPOConfig / parse_config: flags, YAML recipes (flags win), lists, booleans, help texts, and the one-line errors
that bad values raise, each naming the field."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest

import train_grpo
from tinygrpo.base.options import Bound, ConfigError, option_bounds, option_choices
from tinygrpo.base.parser import ArgParser, _field_kind
from tinygrpo.run.config import (
    TRACKERS,
    GRPOConfig,
    parse_config,
    report_trackers,
)

REPO = Path(train_grpo.__file__).resolve().parent
# The single-field rules, derived from the fields' declarations (tinygrpo/base/options.py)
BOUNDS = option_bounds(GRPOConfig)
CHOICES = option_choices(GRPOConfig)


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


def test_flags_override_yaml_of_every_kind(tmp_path):
    path = write(
        tmp_path,
        "dynamic_sampling: true\nmake_plots: false\nepsilon_high: 0.28\nexplore_temperatures: [2.0]\n"
        "num_generations: 4\nper_device_train_batch_size: 64\ndataset_test_split: test\n",
    )
    cfg = parse_config(["--no_dynamic_sampling", "--make_plots", f"--config={path}"])  # (--config=PATH too)
    assert cfg.dynamic_sampling is False and cfg.make_plots is True and cfg.epsilon_high == 0.28
    cfg = parse_config(
        [
            "--config",
            path,
            *"--epsilon_high 0.3 --explore_temperatures 1.5 2.5 --dataset_test_split".split(),
            "",
        ]
    )
    assert (
        cfg.epsilon_high == 0.3 and cfg.explore_temperatures == [1.5, 2.5] and cfg.dataset_test_split is None
    )
    # the checks see the merged values: G = 3 from the file fits the batch of 48 from the flags
    path = write(tmp_path, "num_generations: 3\n", "g3.yaml")
    with pytest.raises(ConfigError, match="not a positive multiple of num_generations=3"):
        parse_config(["--config", path])
    cfg = parse_config(["--config", path, "--per_device_train_batch_size", "48"])
    assert (cfg.num_generations, cfg.per_device_train_batch_size) == (3, 48)


def test_recipes_in_configs_parse_as_their_flags():
    assert parse_config(["--config", str(REPO / "configs/default.yaml")]) == parse_config([])
    flags = "--dataset_name seed_bank --dataset_test_split train --allow_overlapping_splits true --per_device_train_batch_size 288 --beta 0.02 --kl_estimator full"
    flags += " --max_steps 200 --prompt_sampler uniform --explore_rounds 0 --eval_steps 20 --logging_steps 5"
    flags += " --save_steps 0 --output_dir runs/seed_bank"
    assert parse_config(["--config", str(REPO / "configs/seed_bank.yaml")]) == parse_config(flags.split())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a YAML int for a float field is a float, as argparse makes "1" one; a string is read as on a command line
        ("beta: 1\n", {"beta": 1.0}),
        ("learning_rate: 2e-3\n", {"learning_rate": 0.002}),  # (YAML 1.1 reads 2e-3 as a string)
        ("learning_rate: 0.002\n", {"learning_rate": 0.002}),
        ("max_steps: '7'\n", {"max_steps": 7}),
        ("make_plots: 'false'\n", {"make_plots": False}),
        ("make_plots: no\n", {"make_plots": False}),
        ("reward_funcs: [accuracy, format]\nreward_weights: [1, 2]\n", {"reward_weights": [1.0, 2.0]}),
        ("reward_funcs: format\n", {"reward_funcs": ["format"]}),  # a scalar for a list: a list of one
        ("explore_temperatures: 2\n", {"explore_temperatures": [2.0]}),
        ("steps_per_generation: 2\n", {"steps_per_generation": 2}),
        ("epsilon_high: null\ndelta: null\n", {"epsilon_high": None, "delta": None}),
        ("dataset_test_split: ''\n", {"dataset_test_split": None}),
        ("dataset_test_split: none\n", {"dataset_test_split": None}),
        ("output_dir: 12\n", {"output_dir": "12"}),
    ],
)
def test_yaml_values_take_their_fields_types(tmp_path, text, expected):
    cfg = parse_config(["--config", write(tmp_path, text)])
    for name, value in expected.items():
        got = getattr(cfg, name)
        assert got == value and type(got) is type(value), (name, got)
        if isinstance(value, list):
            assert [type(x) for x in got] == [type(x) for x in value]


def test_every_field_has_help_text():
    missing = [f.name for f in fields(GRPOConfig) if not str(f.metadata.get("help", "")).strip()]
    assert missing == []
    text = ArgParser(GRPOConfig).format_help()
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_steps: [3, 4]\n", "max_steps must be a single int, got a list [3, 4]"),
        ("max_steps: [3]\n", "max_steps must be a single int, got a list [3]"),  # one item is still a list
        ("beta: [0.1]\n", "beta must be a single float, got a list [0.1]"),
        ("epsilon_high: [0.3, 0.4]\n", "epsilon_high must be a single float, got a list [0.3, 0.4]"),
        ("make_plots: [true]\n", "make_plots must be a single bool, got a list [True]"),
        ("output_dir: [a, b]\n", "output_dir must be a single str, got a list ['a', 'b']"),
        ("dataset_test_split: []\n", "dataset_test_split must be a single str, got a list []"),
    ],
)
def test_yaml_list_for_a_scalar_is_one_error_naming_the_key_and_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        parse_config(["--config", path, "--max_steps", "5"])  # (a flag for the same field does not hide it)
    assert str(e.value) == f"--config {path}: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the messages of argparse for the same token on the command line (as before recipes set defaults)
        ("max_steps: 3.5\n", "argument --max_steps/--max-steps: invalid int value: '3.5'"),
        ("max_steps: true\n", "argument --max_steps/--max-steps: invalid int value: 'true'"),
        ("max_steps: two\n", "argument --max_steps/--max-steps: invalid int value: 'two'"),
        ("beta: true\n", "argument --beta: invalid float value: 'true'"),
        ("beta: fast\n", "argument --beta: invalid float value: 'fast'"),
        (
            "make_plots: maybe\n",
            "argument --make_plots/--make-plots: Truthy value expected: got maybe but expected one of yes/no, "
            "true/false, t/f, y/n, 1/0 (case insensitive).",
        ),
        (
            "make_plots: 0.5\n",
            "argument --make_plots/--make-plots: Truthy value expected: got 0.5 but expected one of yes/no, "
            "true/false, t/f, y/n, 1/0 (case insensitive).",
        ),
        (
            "reward_weights: [1.0, x]\n",
            "argument --reward_weights/--reward-weights: invalid float value: 'x'",
        ),
        ("reward_funcs: []\n", "argument --reward_funcs/--reward-funcs: expected at least one argument"),
        # what has no command-line spelling: a mapping, a nested list, null where None is not allowed
        ("max_steps: {a: 1}\n", "--config {path}: max_steps must be a scalar or a list, got a mapping"),
        (
            "reward_weights: [[1.0]]\n",
            "--config {path}: reward_weights must be a list of float, got an item [1.0]",
        ),
        (
            "reward_funcs: [accuracy, null]\n",
            "--config {path}: reward_funcs must be a list of str, got an item None",
        ),
        ("num_generations: null\n", "--config {path}: num_generations cannot be null"),
        ("reward_funcs: null\n", "--config {path}: reward_funcs cannot be null"),
    ],
)
def test_yaml_value_of_the_wrong_type_is_one_exact_error(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        parse_config(["--config", path])
    assert str(e.value) == message.format(path=path)


# ------------------------------------------------------------------------------------------------ the tables


def _kind(name: str) -> type:
    return _field_kind(typing.get_type_hints(GRPOConfig)[name])[0]


def _edges(name: str, bound: Bound) -> list[tuple[object, object]]:
    """(just outside, just inside) at each finite end of the bound, as values of the field's type."""
    kind, is_list, _ = _field_kind(typing.get_type_hints(GRPOConfig)[name])
    pairs = []
    for end, is_open, outward in ((bound.lo, bound.lo_open, -1), (bound.hi, bound.hi_open, 1)):
        if end is None:
            continue
        if kind is int:
            near = end - outward  # the integer on the inside next to the end
            pairs.append((end, near) if is_open else (end + outward, end))
        else:
            near, far = math.nextafter(end, -outward * math.inf), math.nextafter(end, outward * math.inf)
            pairs.append((float(end), near) if is_open else (far, float(end)))
    return [([o], [i]) for o, i in pairs] if is_list else pairs


# Fields whose edge value is valid only beside others (the whole-groups rule: 1 x 2 micro-batches holds a group of 2)
CONTEXT = {"per_device_train_batch_size": {"num_generations": 2, "gradient_accumulation_steps": 2}}


# Fields whose run is narrower than the field's own bound, by a rule of GRPOConfig's: temperature's field (SamplingParams,
# the decoder's settings too) admits 0, greedy; the loss's log-probs divide by it, so a run's must be > 0.
RUN_BOUNDS = {"temperature": Bound(0, lo_open=True)}


@pytest.mark.parametrize("name", list(BOUNDS))
def test_every_bound_rejects_just_outside_and_accepts_just_inside(name):
    bound = RUN_BOUNDS.get(name, BOUNDS[name])
    edges = _edges(name, bound)
    assert edges, name
    context = CONTEXT.get(name, {})
    for outside, inside in edges:
        with pytest.raises(ConfigError) as e:
            GRPOConfig(**{name: outside}, **context)
        assert str(e.value) == f"{name} must be {bound.describe()}, got {outside}"
        assert getattr(GRPOConfig(**{name: inside}, **context), name) == inside


def test_temperature_field_admits_greedy_and_a_run_does_not():
    from tinygrpo.rollout.config import SamplingParams

    assert BOUNDS["temperature"].describe() == ">= 0 (0: greedy)"
    assert SamplingParams(temperature=0.0).temperature == 0.0  # (the decoder's greedy setting)
    for config in (SamplingParams, GRPOConfig):
        with pytest.raises(ConfigError) as e:
            config(temperature=-1.0)
        assert str(e.value) == "temperature must be >= 0 (0: greedy), got -1.0"
    with pytest.raises(ConfigError) as e:
        GRPOConfig(temperature=0.0)
    assert str(e.value) == "temperature must be > 0, got 0.0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # written out by hand: the messages the table must keep producing
        (["--seed", "4294967296"], "seed must be in [0, 2**32), got 4294967296"),
        (["--seed", "-1"], "seed must be in [0, 2**32), got -1"),
        (["--num_generations", "1"], "num_generations must be >= 2 (a group needs a baseline), got 1"),
        (["--steps_per_generation", "0"], "steps_per_generation must be >= 1, got 0"),
        (["--eval_steps", "0"], "eval_steps must be >= 1, got 0"),
        (["--top_k", "-1"], "top_k must be >= 0, got -1"),
        (["--max_dynamic_sampling_rounds", "-1"], "max_dynamic_sampling_rounds must be >= 0, got -1"),
        (["--top_p", "2"], "top_p must be in (0, 1], got 2.0"),
        (["--top_p", "0"], "top_p must be in (0, 1], got 0.0"),
        (["--epsilon_high", "0"], "epsilon_high must be > 0, got 0.0"),
        (["--vespo_lambda_neg", "0"], "vespo_lambda_neg must be > 0, got 0.0"),
        (["--entropy_target", "-1"], "entropy_target must be >= 0, got -1.0"),
        (["--off_policy_mask_threshold", "0"], "off_policy_mask_threshold must be > 0, got 0.0"),
        (["--top_entropy_quantile", "1.5"], "top_entropy_quantile must be in [0, 1], got 1.5"),
        (["--adam_beta1", "1"], "adam_beta1 must be in [0, 1), got 1.0"),
        (["--adam_beta2", "-0.5"], "adam_beta2 must be in [0, 1), got -0.5"),
        (["--ref_model_sync_steps", "0"], "ref_model_sync_steps must be >= 1, got 0"),
        (["--pass_rate_ema", "0"], "pass_rate_ema must be in (0, 1], got 0.0"),
        (
            ["--explore_temperatures", "2", "0"],
            "explore_temperatures must be positive numbers, got [2.0, 0.0]",
        ),
        (
            ["--explore_importance_sampling_clip_max", "-1"],
            "explore_importance_sampling_clip_max must be > 0, got -1.0",
        ),
        # the finite-number check comes first
        (["--top_p", "nan"], "top_p must be a finite number, got nan"),
        (["--explore_temperatures", "2", "inf"], "explore_temperatures must be a finite number, got inf"),
        # rules between fields
        (["--num_mini_batches", "3"], "num_mini_batches=3 must divide the 64 groups per process"),
        (
            [
                *"--steps_per_generation 2 --num_mini_batches 2 --per_device_train_batch_size 32 --num_generations 4".split()
            ],
            "num_mini_batches=2 is the older spelling of steps_per_generation: set steps_per_generation (and "
            "gradient_accumulation_steps), not both",
        ),
        (["--epsilon_high", "0.5", "--delta", "1.4"], "delta must be > 1 + epsilon_high, got 1.4"),
        (
            ["--entropy_coef_min", "0.5", "--entropy_coef_max", "0.2"],
            "entropy_coef_min=0.5 must be <= entropy_coef_max=0.2",
        ),
        (
            ["--advantage_mode", "pass_at_k", "--train_pass_k", "8"],
            "train_pass_k must be in [1, num_generations=8) (k = G leaves no signal), got 8",
        ),
        (["--use_kl_in_reward"], "use_kl_in_reward needs beta > 0 (the KL's coefficient in the reward)"),
        (
            ["--prompt_sampler", "hardest"],
            "prompt_sampler='hardest' is not one of uniform, unsolved, informative",
        ),
    ],
)
def test_bound_and_rule_messages_are_exact(argv, message):
    with pytest.raises(ConfigError) as e:
        parse_config(argv)
    assert str(e.value) == message


# The numeric fields with no single-field bound, each for a reason: every other int or float field is in BOUNDS (a
# field left out of it once took 0 and negative batch sizes, and crashed the first step).
UNBOUNDED = {
    "reward_weights": "any finite weights: a negative one penalises",
    "entropy_coef": "its sign picks an entropy bonus or a penalty",
    "entropy_coef_max": "a rule: >= entropy_coef_min",
    "train_pass_k": "a rule: in [1, num_generations) for pass_at_k, unset otherwise",
    "delta": "a rule: > 1 + epsilon_high",
}


def _numeric(hint) -> bool:
    """int or float, alone, optional or in a list."""
    return hint in (int, float) or any(_numeric(a) for a in typing.get_args(hint))


def test_every_numeric_field_is_bounded_or_says_why_not():
    hints = typing.get_type_hints(GRPOConfig)
    numeric = {f.name for f in fields(GRPOConfig) if _numeric(hints[f.name])}
    assert numeric - set(BOUNDS) == set(UNBOUNDED), (
        "bound the new field (option(..., bound=...)), or say why not here"
    )
    for argv in (["--per_device_train_batch_size", "0"], ["--per_device_train_batch_size", "-8"]):
        with pytest.raises(ConfigError, match=r"^per_device_train_batch_size must be >= 1, got -?\d+$"):
            parse_config(argv)


def test_the_tables_name_fields_and_the_defaults_pass_them():
    names = {f.name for f in fields(GRPOConfig)}
    assert set(BOUNDS) <= names and set(CHOICES) <= names
    assert all(_kind(n) in (int, float) for n in BOUNDS)
    assert all(_kind(n) is str for n in CHOICES)
    GRPOConfig()  # every default is inside its bound and among its choices


@pytest.mark.parametrize("name", list(CHOICES))
def test_every_choice_field_rejects_an_unknown_value_and_accepts_its_own(name):
    allowed = CHOICES[name]
    with pytest.raises(ConfigError) as e:
        GRPOConfig(**{name: "no_such_thing"})
    assert str(e.value) == f"{name}='no_such_thing' is not one of {', '.join(allowed)}"
    with pytest.raises(ConfigError, match=f"^{name}="):
        parse_config([f"--{name}", "no_such_thing"])
    for value in allowed:
        assert getattr(GRPOConfig(**{name: value}), name) == value


@pytest.mark.parametrize("tracker", TRACKERS)
def test_a_tracker_that_is_not_installed_is_refused_at_start_up(monkeypatch, tracker):
    # accelerate would warn and train on without the tracker the user asked for
    monkeypatch.setattr(f"accelerate.utils.is_{tracker}_available", lambda: False)
    with pytest.raises(ConfigError) as e:
        GRPOConfig(report_to=tracker)
    assert str(e.value) == f"report_to={tracker}: {tracker} needs its package (pip install {tracker})"
    monkeypatch.setattr(f"accelerate.utils.is_{tracker}_available", lambda: True)
    assert GRPOConfig(report_to=tracker).report_to == tracker
    assert tracker in report_trackers("all") and report_trackers("none") == []
    with pytest.raises(ConfigError, match="unknown tracker 'tensorbored'"):
        GRPOConfig(report_to=f"{tracker},tensorbored")


def test_explore_temperatures_beyond_float32_are_refused():
    with pytest.raises(ConfigError) as e:
        GRPOConfig(explore_temperatures=[2.0, 1e308])
    assert str(e.value).startswith("explore_temperatures holds 1e+308, beyond float32's range")
    assert GRPOConfig(explore_temperatures=[2.0, 3e38]).explore_temperatures == [2.0, 3e38]


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
        ["--dataset_test_split", "None"]
        if how == "flag_None"
        else ["--config", write(tmp_path, "dataset_test_split: null\n")]
    )
    assert parse_config(argv).dataset_test_split is None


@pytest.mark.parametrize("argv", [["--num_generation", "4"], ["--learning", "0.1"]])
def test_abbreviated_flag_is_unknown(argv):
    with pytest.raises(ConfigError, match=argv[0]):
        parse_config(argv)


def test_eval_split_empty_string_disables_evaluation():
    assert parse_config(["--dataset_test_split", ""]).dataset_test_split is None


@pytest.mark.slow
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


def test_an_estimator_registered_as_binary_is_checked_as_pass_at_k():
    # A property of the estimator, not of the name pass_at_k: one registered later with binary_rewards is refused
    # with the KL in its rewards too, and GDPO's normalize_then_sum (which uses no estimator) is not.
    from tinygrpo.algorithm.advantage_estimators import ADV_ESTIMATORS, register_adv_est

    register_adv_est("binary_mode", binary_rewards=True)(lambda x, cfg: (x.rewards, x.rewards))
    try:
        with pytest.raises(
            ConfigError, match="^advantage_mode binary_mode needs rewards of 0 or 1, and use_kl"
        ):
            GRPOConfig(advantage_mode="binary_mode", use_kl_in_reward=True, beta=0.1)
        assert GRPOConfig(advantage_mode="binary_mode").binary_rewards
        gdpo = GRPOConfig(advantage_mode="binary_mode", multi_objective_aggregation="normalize_then_sum")
        assert not gdpo.binary_rewards
    finally:
        del ADV_ESTIMATORS["binary_mode"]
    assert GRPOConfig(advantage_mode="pass_at_k").binary_rewards and not GRPOConfig().binary_rewards


# ================================================================================================ the command line


def test_every_option_is_in_an_argument_group_of_the_help(capsys):
    import dataclasses

    from tinygrpo.run.config import GROUPS, GRPOConfig

    groups = {}
    for f in dataclasses.fields(GRPOConfig):
        owner = next(c for c in GRPOConfig.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
        assert owner is not GRPOConfig, f"{f.name} is in no group: declare it in an option group"
        groups.setdefault(owner._argument_group_name, []).append(f.name)
    titles = [
        "model and data",
        "batches and steps",
        "sampling",
        "generation and exploration",
        "rewards and advantages",
        "loss, KL and entropy",
        "optimizer and schedule",
        "seed, threads and checks",
        "logging, evaluation and saving",
    ]
    assert list(groups) == titles
    assert [g._argument_group_name for g in GROUPS] == titles  # (GROUPS: the help's order)
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    text = capsys.readouterr().out
    at = [text.index(f"\n{t}:\n") for t in titles]
    assert at == sorted(at)  # printed in this order, each once
    for title, names in groups.items():  # each option under its own group's heading
        start = text.index(f"\n{title}:\n")
        end = min([i for i in at if i > start], default=len(text))
        for name in names:
            assert f"  --{name}" in text[start:end], (title, name)


def test_no_x_says_what_it_turns_off(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    text = capsys.readouterr().out  # (the compact help names it in dynamic_sampling's line)
    line = text[text.index("  --dynamic_sampling ") :].split("\n  --")[0]
    assert "Also --no_dynamic_sampling." in line and "\n  --no_dynamic_sampling" not in text
    with pytest.raises(SystemExit):
        parse_config(["--help_full"])
    text = capsys.readouterr().out
    block = text[text.index("--no_dynamic_sampling") :].split("\n  --")[0]
    assert "Turn dynamic_sampling off" in block and "(default" not in block
    assert parse_config(["--no_dynamic_sampling"]).dynamic_sampling is False
    assert parse_config([]).dynamic_sampling is True


@pytest.mark.parametrize(
    "trl, ours, value",
    [
        ("dataset_name", "dataset", "seed_bank"),
        ("dataset_train_split", "train_split", "validation"),
        ("dataset_test_split", "eval_split", "validation"),
        ("num_completions_to_print", "num_completions_to_log", 4),
    ],
)
def test_trls_name_is_the_field_and_the_earlier_name_is_refused_naming_it(tmp_path, trl, ours, value):
    """TRL's name is the field, on the command line and in a recipe; this repository's earlier name is one error line
    that names TRL's, as a flag (either spelling), a recipe key, or beside TRL's name: never silently the last one."""
    from dataclasses import fields

    from tinygrpo.run.config import GRPOConfig

    assert GRPOConfig.RENAMED[ours] == trl and trl in {f.name for f in fields(GRPOConfig)}
    assert not hasattr(GRPOConfig(), ours)  # (no second name to read)
    assert getattr(parse_config([f"--{trl}", str(value)]), trl) == value
    (tmp_path / "new.yaml").write_text(f"{trl}: {value}\n")
    assert getattr(parse_config(["--config", str(tmp_path / "new.yaml")]), trl) == value
    said = f"--{ours} is now --{trl} (TRL's name)"
    for argv in (
        [f"--{ours}", str(value)],
        [f"--{ours}={value}"],
        [f"--{trl}", str(value), f"--{ours}", str(value)],
    ):
        with pytest.raises(ConfigError, match=re.escape(said)):
            parse_config(argv)
    (tmp_path / "old.yaml").write_text(f"{ours}: {value}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{ours} is now {trl} (TRL's name)")):
        parse_config(["--config", str(tmp_path / "old.yaml")])
    assert getattr(parse_config([]), trl) != value  # (the alias really changed something)


@pytest.mark.slow
def test_log_completions_false_logs_none(seed_reference, tmp_path):
    from _runs import run_inproc

    out = tmp_path / "r"
    assert (
        run_inproc(
            seed_reference, out, "--max_steps", "2", "--logging_steps", "1", "--log_completions", "false"
        )
        == 0
    )
    assert not (out / "completions.jsonl").exists() or not (out / "completions.jsonl").read_text()
