"""The single-field checks of a config dataclass, one path for both entry points (GRPOConfig, SFTConfig): a table of
bounds and one of choices, checked by one loop, each failure one ConfigError naming the field and its value."""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Collection
from dataclasses import fields
from typing import NamedTuple


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


def each(bound: Bound, names: str) -> dict[str, Bound]:
    return dict.fromkeys(names.split(), bound)


def check_fields(config: typing.Any, bounds: dict[str, Bound], choices: dict[str, Collection[str]]) -> None:
    """The single-field checks of a config dataclass (GRPOConfig, SFTConfig: one validation path for both entry
    points), each failure one ConfigError naming the field and its value. inf or nan in any number is a mistake (an
    infinite learning rate trains NaNs): checked first, so that the bounds compare finite numbers only. None (an
    Optional field left unset) is not bounded."""
    for f in fields(config):
        value = getattr(config, f.name)
        for x in value if isinstance(value, list) else [value]:
            if isinstance(x, float) and not math.isfinite(x):
                raise ConfigError(f"{f.name} must be a finite number, got {x}")
    for name, bound in bounds.items():
        value = getattr(config, name)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if not items or not all(bound.admits(x) for x in items):
            raise ConfigError(f"{name} must be {bound.describe()}, got {value}")
    for name, allowed in choices.items():
        if getattr(config, name) not in allowed:
            raise ConfigError(f"{name}={getattr(config, name)!r} is not one of {', '.join(allowed)}")


def check_threads(name: str, threads: int) -> None:
    """A thread count above the machine's cores is refused: the extra threads only wait for a core, and torch starts
    every one of them (100,000 threads take minutes to start, before the first step)."""
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ConfigError(
            f"{name}={threads} is more than this machine's {cores} cores (threads beyond them only wait for one); "
            f"use at most {cores}, or 0 for automatic"
        )
