"""Options declared once (tinygrpo/base/options.py): each option is a field of exactly one option group, carrying its
help and its bound or choices; GRPOConfig is composed of the groups; and every component is handed the groups it
reads, never the whole config (a run is watched attribute by attribute)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from _runs import cli

import tinygrpo
import train_grpo
from tinygrpo.base.options import Options, check_options, option_bounds, option_choices
from tinygrpo.run import config as run_config
from tinygrpo.run.config import GROUPS, GRPOConfig

ROOT = Path(tinygrpo.__file__).resolve().parent
# The modules that compose a run from its whole config and hand each component its groups; and the projection.
COMPOSERS = {"run/launch.py", "run/trainer.py", "run/checkpoint.py", "run/config.py", "base/options.py"}


def test_each_option_is_declared_once_in_one_group_with_its_help():
    owners: dict[str, list[str]] = {}
    for group in GROUPS:
        for f in dataclasses.fields(group):
            owners.setdefault(f.name, []).append(group.__name__)
            assert f.metadata.get("help"), f"{group.__name__}.{f.name} has no help"
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    assert set(owners) == {
        f.name for f in dataclasses.fields(GRPOConfig)
    }  # (GRPOConfig declares none of its own)
    assert all(issubclass(g, Options) and g._argument_group_name for g in GROUPS)
    # the tables of rules are read from the fields: a bound on numbers, choices on names
    bounds, choices = option_bounds(GRPOConfig), option_choices(GRPOConfig)
    assert bounds["learning_rate"].describe() == "> 0" and "dapo" in choices["loss_type"]
    assert set(bounds).isdisjoint(choices)


def test_a_group_checks_its_own_fields_when_built_alone():
    from tinygrpo.base.options import ConfigError
    from tinygrpo.rollout.config import SamplingParams
    from tinygrpo.update.config import OptimizerConfig

    with pytest.raises(ConfigError, match=r"^top_p must be in \(0, 1\], got 0.0$"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ConfigError, match="lr_scheduler_type='step' is not one of constant, linear, cosine"):
        OptimizerConfig(lr_scheduler_type="step")
    check_options(SamplingParams.greedy(4))  # (temperature 0: greedy, a decoder's setting, not a run's)
    with pytest.raises(ConfigError, match=r"^temperature must be > 0, got 0.0$"):
        GRPOConfig(temperature=0.0)  # (a run's log-probs divide by it: GRPOConfig's rule between groups)


def test_a_group_of_a_config_holds_its_values_and_no_other():
    cfg = GRPOConfig(temperature=0.7, loss_type="grpo", learning_rate=1e-3)
    for group in GROUPS:
        part = group.of(cfg)
        assert type(part) is group and not isinstance(part, GRPOConfig)
        assert dataclasses.asdict(part) == {f.name: getattr(cfg, f.name) for f in dataclasses.fields(group)}


class _Reads:
    """Which modules read which of a watched config's fields, outside the config's own methods."""

    def __init__(self) -> None:
        self.by: dict[str, set[str]] = {}


def watched(reads: _Reads) -> type:
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    names |= {n for c in GROUPS for n, v in vars(c).items() if isinstance(v, property)}

    class Watched(GRPOConfig):
        watching = False

        def __getattribute__(self, name: str):
            if name in names and object.__getattribute__(self, "watching"):
                frame = sys._getframe(1)
                if frame.f_locals.get("self") is not self:  # (the config's own method or property: its own)
                    path = Path(frame.f_code.co_filename).resolve()
                    if path.is_relative_to(ROOT):
                        reads.by.setdefault(str(path.relative_to(ROOT)), set()).add(name)
            return object.__getattribute__(self, name)

    return Watched


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        # the default experiment's options: explore rounds, dynamic sampling, weighted prompts, held-out evaluation
        [],
        # the KL in the loss and in the reward, off-policy passes, an allocation rule, callbacks' best metric
        "--beta 0.04 --num_iterations 2 --sample_allocation screen --allocation_unit 2 --kl_estimator full".split()
        + "--metric_for_best_model accuracy --eval_pass_k 2".split(),
        "--beta 0.04 --use_kl_in_reward true --advantage_mode rloo --top_entropy_quantile 0.5".split(),
    ],
)
def test_no_component_is_handed_the_whole_config(seed_reference, tmp_path, monkeypatch, extra):
    """A whole run (train_grpo.py's main: checks, trainer, evaluation, logs, a checkpoint, the report) with its
    GRPOConfig watched after it is built: only the modules that compose the run read it (COMPOSERS); a component
    handed the whole config, rather than its groups, would read it from its own module and fail this test."""
    reads = _Reads()
    cls = watched(reads)
    parse = run_config.parse_config

    def parse_watched(argv):
        cfg = cls(**{f.name: getattr(parse(argv), f.name) for f in dataclasses.fields(GRPOConfig)})
        cfg.watching = True
        return cfg

    monkeypatch.setattr("tinygrpo.run.launch.parse_config", parse_watched)
    out = tmp_path / "run"
    argv = cli(seed_reference, out, "--max_steps", "2", "--save_steps", "1", "--logging_steps", "1", *extra)
    argv += "--dataset_test_split train --signal_forecast_prompts 8 --make_plots false".split()
    assert train_grpo.main(argv) == 0
    assert reads.by, "the watch saw no read at all: it watches nothing"
    assert set(reads.by) <= COMPOSERS, {k: sorted(v) for k, v in reads.by.items() if k not in COMPOSERS}
