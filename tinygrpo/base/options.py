"""Options, declared once: each field of an option group (a dataclass, one component's config) carries its default, its
help text (citing its paper) and its single-field rule (a Bound or a set of choices) beside it. GRPOConfig is composed
of the groups (tinygrpo/run/config.py) and hands each component its group (`Group.of(config)`); SFTConfig is one
group. One loop checks every field's rule (check_options), each failure one ConfigError naming the field and its
value; the rules that tie fields together are the groups' own (`rules`) and GRPOConfig's."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection
from dataclasses import MISSING, field, fields
from typing import Any, ClassVar, NamedTuple, Self


class ConfigError(ValueError):
    """A problem with the user's input (config, data, checkpoint): reported as one line, exit code 1."""


class Bound(NamedTuple):
    """The allowed range of one number (of every item, for a list): lo and hi, None where unbounded."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    words: str = ""  # the message's words for the range, where the interval notation is not the clearest

    def admits(self, x: float) -> bool:
        above = self.lo is None or (x > self.lo if self.lo_open else x >= self.lo)
        return above and (self.hi is None or (x < self.hi if self.hi_open else x <= self.hi))

    def describe(self) -> str:
        """The range as the messages write it: >= 1, > 0, in (0, 1]."""
        if self.words:
            return self.words
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo}"
        return f"in {'(' if self.lo_open else '['}{self.lo}, {self.hi}{')' if self.hi_open else ']'}"


AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY = Bound(1), Bound(0), Bound(0, lo_open=True), Bound(0, 1)


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    bound: Bound | None = None,
    choices: Collection[str] | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """An option's one declaration: its default (or `factory`, for a list), its help and its single-field rule.
    `choices` may be a registry's live keys: a loss or estimator registered later is a valid choice too."""
    meta = {"help": help, "bound": bound, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Options:
    """An option group: one component's config, and one argument group of `--help` (`_argument_group_name`)."""

    _argument_group_name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_options(self)
        self.rules()

    @classmethod
    def of(cls, config: Any) -> Self:
        """This group's fields of a config composed of it (GRPOConfig), as this group alone: what its component is
        handed."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    def rules(self) -> None:
        """The rules that tie this group's fields together (each field is in range by then): ConfigError if broken."""


def option_bounds(cls: type) -> dict[str, Bound]:
    """Every bounded field of an option dataclass, with its Bound."""
    return {f.name: f.metadata["bound"] for f in fields(cls) if f.metadata.get("bound") is not None}


def option_choices(cls: type) -> dict[str, Collection[str]]:
    """Every field of an option dataclass that names one of a set of things, with the set."""
    return {f.name: f.metadata["choices"] for f in fields(cls) if f.metadata.get("choices") is not None}


def check_options(config: Any) -> None:
    """Every field's single-field rule, each failure one ConfigError naming the field and its value. inf or nan in
    any number is a mistake (an infinite learning rate trains NaNs): checked first, so that the bounds compare finite
    numbers only. None (an Optional field left unset) is not bounded."""
    for f in fields(config):
        value = getattr(config, f.name)
        for x in value if isinstance(value, list) else [value]:
            if isinstance(x, float) and not math.isfinite(x):
                raise ConfigError(f"{f.name} must be a finite number, got {x}")
    for f in fields(config):
        value, bound, allowed = getattr(config, f.name), f.metadata.get("bound"), f.metadata.get("choices")
        items = value if isinstance(value, list) else [value]
        if bound is not None and value is not None and (not items or not all(bound.admits(x) for x in items)):
            raise ConfigError(f"{f.name} must be {bound.describe()}, got {value}")
        if allowed is not None and value not in allowed:
            raise ConfigError(f"{f.name}={value!r} is not one of {', '.join(allowed)}")


def check_threads(name: str, threads: int) -> None:
    """A thread count above the machine's cores is refused: the extra threads only wait for a core, and torch starts
    every one of them (100,000 threads take minutes to start, before the first step)."""
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ConfigError(
            f"{name}={threads} is more than this machine's {cores} cores (threads beyond them only wait for one); "
            f"use at most {cores}, or 0 for automatic"
        )
