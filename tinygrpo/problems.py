"""The a+b problem sets: a deterministic builder and a `datasets` loader.

Each row: `prompt` ("37+48="), `answer` ("85"), the operands `a`, `b`, and an `id`.
- `seed_bank`: the seed demo's 36 questions, a, b in 0..5 (id = a * 6 + b, as in the demo). One split, `train`.
- `addition`: every a + b with a, b < 10**digits (default 2 digits: 10,000 problems). A fixed split: `test` is
  500 problems drawn with `random.Random(1234)`, held out from SFT and from GRPO alike; `train` is the rest.
  `validation` (500 problems drawn with `random.Random(1235)` from the `train` problems the default SFT
  reference was not trained on) and `train_without_validation` (the
  rest of `train`) are for studies: every choice is made on validation, the test split only reports.
The committed files under `data/` are this builder's output (a test checks that), loadable by path with
`datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (datasets is imported where a split is loaded: the builders stay cheap to import)
    from datasets import Dataset, DatasetDict

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
TEST_SIZE = 500
SPLIT_SEED = 1234
MAX_ENUMERATED = 20_000
SFT_SIZE, SFT_SEED = (
    400,
    0,
)  # the default reference's training problems (tinygrpo/sft.py's train_size and seed)  # above this many pairs, sample instead of enumerating every pair


def make_row(a: int, b: int, id_: int) -> dict:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "a": a, "b": b, "id": id_}


def build_seed_bank() -> dict[str, list[dict]]:
    """The 36 questions of the seed demo, in its order (q = a * 6 + b)."""
    return {"train": [make_row(a, b, a * 6 + b) for a in range(6) for b in range(6)]}


def build_addition(
    digits: int = 2, test_size: int | None = None, seed: int = SPLIT_SEED
) -> dict[str, list[dict]]:
    """All pairs a, b < 10**digits (or a fixed random sample of 20,000 when there are more), split train/test.

    test_size defaults to 500, or a fifth of the problems when there are fewer than 2,500 (1 digit: 20 of 100).
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    n = 10**digits
    if n * n <= MAX_ENUMERATED:
        pairs = [(a, b) for a in range(n) for b in range(n)]
    else:
        rng = random.Random(seed + digits)
        pairs = sorted({(rng.randrange(n), rng.randrange(n)) for _ in range(MAX_ENUMERATED)})
    if test_size is None:
        test_size = min(TEST_SIZE, len(pairs) // 5)
    if not 0 < test_size < len(pairs):
        raise ValueError(f"test_size must be in 1..{len(pairs) - 1}, got {test_size}")
    rows = [make_row(a, b, i) for i, (a, b) in enumerate(pairs)]
    test_ids = set(random.Random(seed).sample(range(len(rows)), test_size))
    train = [r for r in rows if r["id"] not in test_ids]
    # A validation split carved from train, for every choice a study makes (the test split is for reporting), out of
    # the problems the default SFT reference did not see (its sample of train, as `datasets` shuffles with seed 0),
    # so that validation is as new to the reference as test is.
    sft = set(np.random.default_rng(SFT_SEED).permutation(len(train))[:SFT_SIZE].tolist())
    unseen = [i for i in range(len(train)) if i not in sft]
    val_ids = {
        train[i]["id"] for i in random.Random(seed + 1).sample(unseen, min(test_size, len(unseen) // 2))
    }
    return {
        "train": train,
        "test": [r for r in rows if r["id"] in test_ids],
        "validation": [r for r in train if r["id"] in val_ids],
        "train_without_validation": [r for r in train if r["id"] not in val_ids],
    }


# The kinds of a+b problem that accuracy is broken down by (a problem may be of several kinds, or of none).
PROBLEM_KINDS = ("one_digit_operand", "carry", "sum_ge_100")


def problem_kinds(a: list[int], b: list[int]) -> dict[str, list[bool]]:
    """For each kind of PROBLEM_KINDS, whether each problem a[i] + b[i] is of that kind: an operand below 10, a carry
    out of the units, a sum of three digits or more."""
    return {
        "one_digit_operand": [x < 10 or y < 10 for x, y in zip(a, b, strict=True)],
        "carry": [x % 10 + y % 10 >= 10 for x, y in zip(a, b, strict=True)],
        "sum_ge_100": [x + y >= 100 for x, y in zip(a, b, strict=True)],
    }


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def build_all(out_dir: Path = DATA_DIR) -> list[Path]:
    """Write the committed problem files: seed_bank/train.jsonl, addition/{train,test,validation,
    train_without_validation}.jsonl."""
    written = []
    for name, splits in (("seed_bank", build_seed_bank()), ("addition", build_addition())):
        for split, rows in splits.items():
            path = Path(out_dir) / name / f"{split}.jsonl"
            write_jsonl(rows, path)
            written.append(path)
    return written


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
            f"dataset {name_or_path!r}: no such directory (known names: seed_bank, addition; or a directory of "
            f"<split>.jsonl files)"
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
