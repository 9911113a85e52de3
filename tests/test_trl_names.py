"""A TRL user's habits: TRL's options we lack answered with one line each, TRL's names taken with TRL's meanings,
and a --help that reads (one line an option where it can, at most 250 lines)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import fields

import pytest
import torch

from tinygrpo.base.options import ConfigError
from tinygrpo.base.parser import GRPO_HINTS as GRPO
from tinygrpo.base.parser import SFT_HINTS as SFT
from tinygrpo.base.parser import parse_args
from tinygrpo.run.config import GRPOConfig, parse_config
from tinygrpo.sft.config import SFTConfig
from tinygrpo.update.config import OptimizerConfig
from tinygrpo.update.optim import build_optimizer

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(GRPO))
def test_each_trl_option_a_run_lacks_says_what_to_use(name):
    flag = f"--{name.replace('_', '-')}" if len(name) % 2 else f"--{name}"  # (either spelling: half each)
    with pytest.raises(ConfigError) as e:
        parse_config([flag, "1"])
    assert str(e.value) == f"{name}: TRL's option; {GRPO[name]}"
    assert name not in {f.name for f in fields(GRPOConfig)}  # (a hint never hides an option we take)


@pytest.mark.parametrize("name", sorted(SFT))
def test_each_trl_option_sft_lacks_says_what_to_use(name):
    with pytest.raises(ConfigError, match=f"^{name}: TRL's option; "):
        parse_args(SFTConfig, [f"--{name}", "1"])
    assert name not in {f.name for f in fields(SFTConfig)}


def test_an_unknown_option_that_trl_lacks_too_is_listed():
    with pytest.raises(ConfigError) as e:
        parse_config(["--no_such_option", "1"])
    assert str(e.value) == "unknown argument(s): --no_such_option 1 (see --help)"


@pytest.mark.parametrize(
    "trl, earlier",
    [
        ("label_smoothing_factor", "label_smoothing"),
        ("dataset_name", "dataset"),
        ("dataset_train_split", "train_split"),
        ("dataset_test_split", "eval_split"),
        ("per_device_train_batch_size", "batch_size"),
        ("torch_num_threads", "threads"),
        ("logging_steps", "log_every"),
        ("lr_scheduler_type", "cosine_decay"),
    ],
)
def test_sfts_fields_have_trls_names_and_refuse_the_earlier_ones_naming_them(trl, earlier, tmp_path):
    value = {"label_smoothing_factor": "0.1", "lr_scheduler_type": "cosine"}.get(trl, "validation")
    if trl in ("per_device_train_batch_size", "torch_num_threads", "logging_steps"):
        value = "1"
    assert str(getattr(parse_args(SFTConfig, [f"--{trl}", value]), trl)) == value
    (tmp_path / "new.yaml").write_text(f"{trl}: {value}\n")
    assert str(getattr(parse_args(SFTConfig, ["--config", str(tmp_path / "new.yaml")]), trl)) == value
    with pytest.raises(ConfigError, match=re.escape(f"--{earlier} is now --{trl} (TRL's name)")):
        parse_args(SFTConfig, [f"--{earlier}", value])
    (tmp_path / "old.yaml").write_text(f"{earlier}: {value}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{earlier} is now {trl} (TRL's name)")):
        parse_args(SFTConfig, ["--config", str(tmp_path / "old.yaml")])
    assert trl in {f.name for f in fields(SFTConfig)} and earlier not in {f.name for f in fields(SFTConfig)}


def _build(model: torch.nn.Module, cfg: GRPOConfig):
    """The run's optimizer and schedule: the config's optimizer group, over its max_steps."""
    return build_optimizer(model, OptimizerConfig.of(cfg), cfg.max_steps)


@pytest.mark.parametrize("ratio,steps,warmup", [(0.1, 100, 10), (0.05, 30, 2), (0.0, 50, 0)])
def test_warmup_ratio_is_transformers_share_of_max_steps_rounded_up(ratio, steps, warmup):
    cfg = GRPOConfig(warmup_ratio=ratio, max_steps=steps, lr_scheduler_type="linear", learning_rate=1.0)
    _, scheduler = _build(torch.nn.Linear(2, 2), cfg)
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    assert warmup == math.ceil(ratio * steps)
    assert lrs[: warmup + 1] == pytest.approx(
        [i / max(1, warmup) for i in range(warmup + 1)] if warmup else [1.0]
    )
    cfg = GRPOConfig(warmup_ratio=0.5, warmup_steps=3, max_steps=steps, lr_scheduler_type="linear")
    assert _build(torch.nn.Linear(2, 2), cfg)[1].lr_lambdas[0](3) == 1.0  # (warmup_steps wins)


def test_adam_epsilon_reaches_adamw():
    opt, _ = _build(torch.nn.Linear(2, 2), GRPOConfig(adam_epsilon=1e-6))
    assert opt.param_groups[0]["eps"] == 1e-6
    opt, _ = _build(torch.nn.Linear(2, 2), GRPOConfig())
    assert opt.param_groups[0]["eps"] == torch.optim.AdamW([torch.zeros(1)]).defaults["eps"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_sft.py"])
def test_help_is_at_most_250_lines_with_every_option_once(script):
    out = subprocess.run(
        [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    ).stdout
    lines = out.splitlines()
    assert len(lines) <= 250, len(lines)
    cls = GRPOConfig if script == "train_grpo.py" else SFTConfig
    names = [f.name for f in fields(cls) if f.init]
    for name in names:
        assert sum(line.startswith(f"  --{name} ") or line == f"  --{name}" for line in lines) == 1, name
    assert not any(
        line.lstrip().startswith("--no_") or "-" in line.split()[0][2:]
        for line in lines
        if line.startswith("  --")
    )


def test_sfts_help_has_grpos_groups_and_every_option_in_one(capsys):
    with pytest.raises(SystemExit):
        parse_args(SFTConfig, ["--help"])
    text = capsys.readouterr().out
    titles = list(dict.fromkeys(SFTConfig.ARGUMENT_GROUPS.values()))
    at = [text.index(f"\n{t}:\n") for t in titles]
    assert at == sorted(at)
    grpo_groups = {c.__dict__.get("_argument_group_name") for c in GRPOConfig.__mro__} - {None}
    assert set(titles) <= grpo_groups  # (the same words for the same kind of option in both scripts)
    for f in fields(SFTConfig):
        title = SFTConfig.ARGUMENT_GROUPS[f.name]  # (every option is in a group)
        start = text.index(f"\n{title}:\n")
        end = min([i for i in at if i > start], default=len(text))
        assert f"  --{f.name}" in text[start:end], (title, f.name)
