"""Problem sets on disk: the `datasets` loader and its checks, and the JSONL writer the tasks' builders use.

A problem set is a directory of `<split>.jsonl` files, one JSON object a row with at least a non-empty string
`prompt` (and an `answer` or the columns its verifier reads). The built-in sets live under `data/<name>/`; each is a
task's generator's output (tinygrpo/tasks/, rebuilt by `python data/build.py`, a test checks they agree), loadable
by path with `datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (datasets is imported where a split is loaded: the builders stay cheap to import)
    from datasets import Dataset, DatasetDict

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def dataset_dir(name_or_path: str) -> Path:
    """The directory a problem set is read from: the path if it is a directory, else data/<name> (which may not
    exist)."""
    path = Path(name_or_path)
    return path if path.is_dir() else DATA_DIR / name_or_path


def load_problems(name_or_path: str) -> DatasetDict:
    """Load a problem set by name (`seed_bank`, `addition`) or by a directory holding `<split>.jsonl` files."""
    path = dataset_dir(name_or_path)
    if not path.is_dir():
        raise ValueError(
            f"dataset {name_or_path!r}: no such directory (known names: {', '.join(_dataset_names())}; or a "
            f"directory of <split>.jsonl files)"
        )
    files = {p.stem: str(p) for p in sorted(path.glob("*.jsonl"))}
    if not files:
        raise ValueError(f"dataset {name_or_path!r}: no <split>.jsonl files in {path}")
    columns = {split: check_rows(Path(f)) for split, f in files.items()}
    first, cols = next(iter(columns.items()))
    for split, other in columns.items():
        for c in cols:
            if c not in other:
                raise ValueError(
                    f"{files[split]}: split {split!r} has no column {c!r}, which split {first!r} has"
                )
        for c in other:
            if c not in cols:
                raise ValueError(
                    f"{files[first]}: split {first!r} has no column {c!r}, which split {split!r} has"
                )
    from datasets import load_dataset

    return load_dataset("json", data_files=files)


def check_rows(path: Path) -> dict[str, str]:
    """Every line of a <split>.jsonl file, in one pass: a JSON object with the fields of the first row, each field
    of one JSON type throughout (or null), and a non-empty string prompt. Returns {field: type name}. A problem is a
    ValueError naming the file, the line and the field."""
    types: dict[str, str] = {}
    rows = 0
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.rstrip("\n"))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path} line {n}: expected a JSON object, got {_json_type(row)}")
                if rows == 0:
                    types = {k: _json_type(v) for k, v in row.items()}
                elif row.keys() != types.keys():
                    missing, extra = sorted(types.keys() - row.keys()), sorted(row.keys() - types.keys())
                    what = f"has no field {missing[0]!r}" if missing else f"has a field {extra[0]!r}"
                    raise ValueError(f"{path} line {n}: {what} that the first row does not")
                for k, v in row.items():
                    t = _json_type(v)
                    if types[k] == "null":
                        types[k] = t
                    elif t not in ("null", types[k]):
                        raise ValueError(f"{path} line {n}: field {k!r} is {t}, earlier rows have {types[k]}")
                prompt = row.get("prompt", "")
                if "prompt" in row and not (isinstance(prompt, str) and prompt):
                    raise ValueError(
                        f"{path} line {n}: field 'prompt' must be a non-empty string, got {prompt!r}"
                    )
                rows += 1
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if rows == 0:
        raise ValueError(f"{path}: no rows (an empty split)")
    return types


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}[type(value)]


def load_splits(name_or_path: str, *splits: str | None) -> list[Dataset | None]:
    """Splits of one problem set, loaded and checked once; None for a split given as None. A clear error when a
    split does not exist."""
    ds = load_problems(name_or_path)
    for split in splits:
        if split is not None and split not in ds:
            raise ValueError(f"dataset {name_or_path!r} has no split {split!r} (it has: {', '.join(ds)})")
    return [None if split is None else ds[split] for split in splits]


def load_split(name_or_path: str, split: str) -> Dataset:
    """One split of a problem set (see load_splits)."""
    return load_splits(name_or_path, split)[0]


def _dataset_names() -> list[str]:
    """The built-in problem sets: the tasks' (tinygrpo/tasks/), and a task family's by its pattern."""
    from .task import TASK_FAMILIES, TASKS, discover_tasks

    discover_tasks()
    fixed = sorted({t.dataset for t in TASKS.values() if ":" not in t.name})
    return fixed + [f"{prefix}_NAME" for prefix in sorted(TASK_FAMILIES)]
