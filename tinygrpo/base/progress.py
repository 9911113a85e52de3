"""Long start-up work says what it does: a bar on stderr for work that takes more than a few seconds (loading and
checking a large problem set, tokenizing its prompts, probing every row with the rewards), and none otherwise.
Only the main process draws (RANK 0, or no launcher)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
DELAY = 3.0  # seconds before a bar appears: short work stays silent


def progress(items: Iterable[T], total: int, desc: str, unit: str = "rows") -> Iterator[T]:
    """`items`, with a bar that appears once iterating them has taken DELAY seconds."""
    quiet = os.environ.get("RANK", "0") != "0"
    yield from tqdm(
        items,
        total=total,
        desc=desc,
        unit=f" {unit}",
        delay=DELAY,
        disable=quiet,
        file=sys.stderr,
        leave=False,
    )


def chunks(n: int, size: int = 10_000) -> list[tuple[int, int]]:
    """[lo, hi) ranges covering 0..n in blocks of `size` (one when n is small)."""
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)] or [(0, 0)]
