"""Command-line parsing of a config dataclass as TRL's `TrlParser` does it, and TRL's options a run here does not take: `--config recipe.yaml` sets the parser's
defaults, each value checked against its field's type first, and command-line flags override them. No translation
of YAML into argv."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import types
import typing
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from tinygrpo.base.options import ConfigError


class CompactHelp(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` that reads: each option once, by its own name and the kind of value it takes, with the first sentence
    of its help (its `-` spelling, its TRL name and its `--no_X` still parse, and are named in its line);
    `--help_full` prints every word and every name."""

    full = False

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=40, width=120)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or self.full:
            return super()._format_action_invocation(action)
        name = action.option_strings[0]
        if action.nargs == 0:
            return name
        kind = {int: "INT", float: "FLOAT"}.get(getattr(action, "kind", None), "VALUE")
        if action.nargs == "?":
            return f"{name} [BOOL]" if getattr(action, "kind", None) is bool else f"{name} [{kind}]"
        return f"{name} {kind}" + (" ..." if action.nargs in ("+", "*") else "")

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not self.full:
            text = text.split(". ")[0].rstrip(".") + "." if text else ""
            also = getattr(action, "also", ())
            if also:
                text += f" Also {', '.join(also)}."
        return super()._get_help_string(argparse.Namespace(**{**vars(action), "help": text}))

    def add_argument(self, action: argparse.Action) -> None:
        if self.full or not getattr(action, "hidden_in_help", False):
            super().add_argument(action)


class FullHelp(CompactHelp):
    full = True


class ArgParser(HfArgumentParser):
    """HfArgumentParser with `--help` in argument groups (a config's fields grouped by the mixin dataclass that
    declares them, titled by its `_argument_group_name`), `--no_X` that says what it turns off, and a compact
    `--help` (CompactHelp; `--help_full` for all)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, formatter_class=CompactHelp, **kwargs)
        self.add_argument(
            "--help_full",
            action=_FullHelp,
            nargs=0,
            default=argparse.SUPPRESS,
            help="Every option's whole help text, and every name it takes.",
        )

    def error(self, message: str) -> None:
        raise ConfigError(message)  # argparse prints usage and exits; the caller prints one line instead

    def _add_dataclass_arguments(self, dtype: type) -> None:
        hints = typing.get_type_hints(dtype)
        groups: dict[str, argparse._ArgumentGroup] = {}
        for title in dict.fromkeys(getattr(dtype, "ARGUMENT_GROUPS", {}).values()):  # (in the table's order)
            groups[title] = self.add_argument_group(title)
        for f in dataclasses.fields(dtype):
            if not f.init:
                continue
            f.type = hints[f.name]
            owner = next(c for c in dtype.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
            # a mixin's group, or the config's own table of them (SFTConfig: one dataclass, grouped by ARGUMENT_GROUPS)
            title = getattr(dtype, "ARGUMENT_GROUPS", {}).get(f.name) or owner.__dict__.get(
                "_argument_group_name"
            )
            target = groups.setdefault(title, self.add_argument_group(title)) if title else self
            before = len(self._actions)
            self._parse_dataclass_field(target, _argparse_field(f))
            main = self._actions[before]
            main.kind = _field_kind(f.type)[0]  # (the compact help names the kind of value)
            main.also = []
            for action in self._actions[before + 1 :]:  # the --no_X of a field that defaults to True
                action.help = f"Turn {f.name} off (as --{f.name} false)."
                action.default = (
                    argparse.SUPPRESS
                )  # (never used: the field's own action sets the default first)
                action.hidden_in_help = True
                main.also.append(action.option_strings[0])


def _argparse_field(f: dataclasses.Field) -> dataclasses.Field:
    """The field as HfArgumentParser reads it: its metadata become argparse's keywords, so only its help goes (its
    bound and choices are the config's own checks, with the config's messages: tinygrpo/base/options.py)."""
    f = copy.copy(f)
    f.metadata = types.MappingProxyType({"help": f.metadata.get("help", "")})
    return f


class _FullHelp(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.formatter_class = FullHelp
        parser.print_help()
        parser.exit()


def _field_kind(hint: object) -> tuple[type, bool, bool]:
    """(type, is a list of that type, accepts None) of a field's annotation: int, float | None, list[str], ..."""
    args = typing.get_args(hint)
    nullable = type(None) in args
    if nullable:
        (hint,) = [a for a in args if a is not type(None)]
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True, nullable
    return typing.cast(type, hint), False, nullable


def _action(parser: ArgParser, key: str) -> argparse.Action:
    return next(a for a in parser._actions if a.option_strings[:1] == [f"--{key}"])  # (not --no_{key})


def _convert(parser: ArgParser, key: str, value: object, kind: type, token: str) -> object:
    """One YAML scalar as a `kind`. A value of that type is taken as it is (an int for a float becomes a float);
    anything else is converted from `token` by argparse's own conversion, so that what `--key token` accepts is
    accepted and what it rejects fails with argparse's message (invalid int value: 'two')."""
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    try:
        return parser._get_value(_action(parser, key), token)
    except argparse.ArgumentError as e:
        raise ConfigError(str(e)) from None


def read_recipe(path: str, parser: ArgParser, cls: type) -> dict[str, object]:
    """A YAML recipe's values, each checked against its field's type: they become the parser's defaults, which
    argparse takes as they are (it converts only the strings of the command line)."""
    where = f"--config {path}"
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{where}: no such file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read it: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        at = f" (line {line + 1})" if line is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of field: value, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)  # (not field.type: HfArgumentParser rewrites it in place)
    values: dict[str, object] = {}
    for key, value in data.items():
        if key in getattr(cls, "RENAMED", {}):
            raise ConfigError(f"{where}: {key} is now {cls.RENAMED[key]} (TRL's name)")
        if key not in hints:
            raise ConfigError(f"{where}: unknown config key {key!r}")
        kind, is_list, nullable = _field_kind(hints[key])
        if value is None:  # null: "nothing", for an Optional field
            if not nullable:
                raise ConfigError(f"{where}: {key} cannot be null")
            values[key] = None
        elif isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a scalar or a list, got a mapping")
        elif not is_list:
            if isinstance(value, list):  # even of one item: a list where one value belongs is a mistake
                raise ConfigError(f"{where}: {key} must be a single {kind.__name__}, got a list {value}")
            # the token of a bool is lowercase, as on a command line (max_steps: true -> invalid int value: 'true')
            token = str(value).lower() if isinstance(value, bool) else str(value)
            values[key] = _convert(parser, key, value, kind, token)
        else:
            # a scalar is a list of one, as after `--key v`
            items = value if isinstance(value, list) else [value]
            if not items:  # as argparse says of `--key` with no value
                raise ConfigError(
                    f"argument {'/'.join(_action(parser, key).option_strings)}: expected at least one argument"
                )
            bad = [item for item in items if item is None or isinstance(item, (list, dict))]
            if bad:
                raise ConfigError(f"{where}: {key} must be a list of {kind.__name__}, got an item {bad[0]!r}")
            values[key] = [_convert(parser, key, item, kind, str(item)) for item in items]
    return values


def check_renamed(argv: list[str], renamed: dict[str, str]) -> None:
    """A flag this repository once had under another name is refused in one line naming the new one (TRL's)."""
    for a in argv:
        old = a.removeprefix("--").split("=")[0]
        if a.startswith("--") and old in renamed:
            raise ConfigError(f"--{old} is now --{renamed[old]} (TRL's name)")


def parse_args(
    cls: type,
    argv: list[str] | None = None,
    description: str | None = None,
    defaults: dict[str, object] | None = None,
    recipes: typing.Sequence[str] = (),
) -> typing.Any:
    """`--config file.yaml` (optional, anywhere in argv) sets the defaults, over `recipes` (YAML files, in order)
    and then `defaults` (a task's recipe); flags override them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    check_renamed(argv, getattr(cls, "RENAMED", {}))
    # allow_abbrev=False: a misspelt flag (--learning 0.1) is an error, not a silent prefix match.
    usage = f"{Path(sys.argv[0]).name} [--config RECIPE.yaml] [--OPTION VALUE ...]"  # (the groups below list them)
    parser = ArgParser(cls, description=description, allow_abbrev=False, usage=usage)
    parser.add_argument("--config", help="YAML recipe whose keys are the fields below (flags override it).")
    for recipe in recipes:  # (a task's recipe file, under its own settings below)
        parser.set_defaults(**read_recipe(recipe, parser, cls))
    if defaults:
        parser.set_defaults(**defaults)
    at = next((i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")), None)
    if at is not None:
        if argv[at] != "--config":  # --config=PATH
            path, argv = argv[at].removeprefix("--config="), argv[:at] + argv[at + 1 :]
        elif at + 1 < len(argv):
            path, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
        else:
            raise ConfigError("--config needs a path to a YAML file")
        parser.set_defaults(**read_recipe(path, parser, cls))
    cfg, *rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    remaining = rest[-1]
    if remaining:
        raise ConfigError(unknown_line(remaining, getattr(cls, "TRL_HINTS", {})))
    return cfg


# TRL's options that a run here does not take, each with what to use instead or why it is not supported: a TRL user
# who types one gets that line, not a bare "unknown argument" (GRPOConfig's and SFTConfig's `TRL_HINTS`).
NO_HUB = (
    "not supported here: no model hub is reached (models are trained here and saved with save_pretrained)"
)
ONE_LOOP = "not supported here: decoding is this repository's own batched loop (tinygrpo/rollout/sampling.py)"

TRAINING = {  # (TRL's TrainingArguments, for GRPO and SFT alike)
    "optim": "not supported here: the optimizer is torch's fused AdamW (TRL's default, adamw_torch); "
    "adam_beta1, adam_beta2, adam_epsilon and weight_decay set it",
    "lr_scheduler_kwargs": "not supported here: lr_scheduler_type (linear, cosine, constant, ...) takes no arguments",
    "per_device_eval_batch_size": "not supported here: the held-out split is evaluated in one batch",
    "eval_strategy": "not supported here: eval_steps says when (every N steps, and at 0 and the end)",
    "save_strategy": "not supported here: save_steps says when (0 = only at the end)",
    "logging_strategy": "not supported here: logging_steps says when",
    "gradient_checkpointing": "not needed here: tiny models keep every activation",
    "fp16": "not supported here: bf16 (autocast, float32 weights) is the mixed precision",
    "push_to_hub": NO_HUB,
    "hub_model_id": NO_HUB,
    "dataloader_num_workers": "not needed here: the prompts are tokenized once, in memory",
    "disable_dropout": "not needed here: tiny_lm has no dropout, and decoding runs in eval mode",
    "model_init_kwargs": "not supported here: model_name_or_path is a directory of save_pretrained files, loaded "
    "as saved",
}

GRPO_HINTS = {
    **TRAINING,
    "generation_batch_size": "here per_device_train_batch_size x steps_per_generation is what a generation "
    "samples per process: set steps_per_generation (TRL's generation_batch_size / per_device_train_batch_size / "
    "processes)",
    "generation_kwargs": ONE_LOOP + "; temperature, top_k, top_p, min_p and repetition_penalty set it",
    "use_vllm": ONE_LOOP,
    "log_completions_steps": "here logging_steps says when completions are logged (log_completions)",
}

SFT_HINTS = {
    **TRAINING,
    "gradient_accumulation_steps": "not supported in SFT here: one optimizer step is one batch; a larger step is a "
    "larger per_device_train_batch_size",
    "num_train_epochs": "not supported in SFT here: it samples its batches with replacement; set max_steps",
    "max_length": "not supported here: n_positions is the context (prompt + completion), checked against the "
    "longest example",
    "packing": "not supported here: one example a row, left-padded",
    "completion_only_loss": "always on here: only the completion (and <eos>) carries labels",
}


def unknown_line(flags: list[str], hints: dict[str, str]) -> str:
    """The error for unknown command-line arguments: each TRL option among them with its hint, else the list."""
    known = [f for f in flags if f.startswith("--") and f[2:].split("=")[0].replace("-", "_") in hints]
    if known:
        name = known[0][2:].split("=")[0].replace("-", "_")
        return f"{name}: TRL's option; {hints[name]}"
    return f"unknown argument(s): {' '.join(flags)} (see --help)"
