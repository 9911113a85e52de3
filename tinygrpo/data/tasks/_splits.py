"""How a task's generated rows become disjoint splits (shared by the task files)."""

from __future__ import annotations


def split_rows(rows: list[dict], sizes: dict[str, int]) -> dict[str, list[dict]]:
    """Cut distinct, already shuffled rows into consecutive splits of the given sizes, in the order of `sizes`
    (validation before test, so that adding training rows never changes them: pass train last)."""
    if sum(sizes.values()) > len(rows):
        raise ValueError(f"{len(rows)} rows cannot fill splits of {sizes}")
    out, start = {}, 0
    for split, n in sizes.items():
        out[split] = rows[start : start + n]
        start += n
    return out
