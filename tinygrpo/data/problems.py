"""Problem sets on disk: the `datasets` loader and its checks, and the JSONL writer the tasks' builders use.

A problem set is a directory of `<split>.jsonl` files, one JSON object a row with at least a non-empty string
`prompt` (and an `answer` or the columns its verifier reads). The built-in sets live under `data/<name>/`; each is a
task's generator's output (tinygrpo/data/tasks/, rebuilt by `python data/build.py`, a test checks they agree), loadable
by path with `datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tinygrpo.base.progress import progress

if TYPE_CHECKING:  # (datasets is imported where a split is loaded: the builders stay cheap to import)
    from datasets import Dataset, DatasetDict


def _data_dir() -> Path:
    """Where the problem sets live: $TINYGRPO_DATA_DIR if set; else data/ beside the package (the repository, in
    an editable install); else ./data (a non-editable install, run from the repository root)."""
    if env := os.environ.get("TINYGRPO_DATA_DIR"):
        return Path(env).resolve()
    beside = Path(__file__).resolve().parents[2] / "data"
    return beside if beside.is_dir() else (Path.cwd() / "data").resolve()


DATA_DIR = _data_dir()


def _directories() -> list[str]:
    return sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir()) if DATA_DIR.is_dir() else []


# The names a problem set goes by, for the error line of an unknown one. The task registry knows them (its tasks' and
# families' sets) and sets this when it is imported (tinygrpo/data/task.py); this module does not import it (the
# registry imports this one). Until then: the directories under DATA_DIR.
known_names: Callable[[], list[str]] = _directories
# What a build wrote, beside its splits: {"task": name, "splits": {split: {"rows": n, "sha256": hex}}}, written last. A directory
# with one is checked against it on every load: a split cut short or changed since is refused, never trained on.
MANIFEST = "manifest.json"
LARGE_BYTES = 4 << 20  # a problem set this large takes seconds to load and check: a line says so


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def write_jsonl(rows: list[dict], path: Path) -> dict[str, int | str]:
    """`rows` as one JSON object a line, written whole or not at all (a temporary name, renamed when complete);
    returns what the manifest records of it."""
    from tinygrpo.base.files import write_atomic

    data = jsonl_bytes(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    return {"rows": len(rows), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(directory: Path, task: str, splits: dict[str, dict[str, int | str]]) -> None:
    from tinygrpo.base.files import write_atomic

    write_atomic(directory / MANIFEST, json.dumps({"task": task, "splits": splits}, indent=1) + "\n")


def staging_dirs(directory: Path, pid: int | None = None) -> tuple[Path, Path]:
    """Where a build of `directory` by process `pid` (this one's by default) writes before it publishes
    (`.<name>.building-<pid>`) and where the build it replaces waits while the two are swapped
    (`.<name>.replaced-<pid>`): hidden names beside it, which no reader opens; one pair a process, so that two runs
    that build the same set at once (a study's seeds side by side) never write into each other's."""
    directory = Path(directory)
    pid = os.getpid() if pid is None else pid
    return (
        directory.with_name(f".{directory.name}.building-{pid}"),
        directory.with_name(f".{directory.name}.replaced-{pid}"),
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's process, alive)
        return True
    return True


def sweep_build_leftovers(directory: Path) -> None:
    """Undo what killed builds of `directory` left (those of processes that are gone, and this process's own): a
    swap stopped between its two renames is undone (the build it was replacing goes back), and the staging
    directories are removed. A live process's build in progress, and everything else, is left alone."""
    import glob
    import shutil

    directory = Path(directory)
    pids = set()
    for p in directory.parent.glob(f".{glob.escape(directory.name)}.*-*"):
        kind, _, pid = p.name.removeprefix(f".{directory.name}.").rpartition("-")
        if kind in ("building", "replaced") and pid.isdigit():
            pids.add(int(pid))
    for pid in sorted(pids):
        if pid != os.getpid() and _alive(pid):
            continue
        staging, replaced = staging_dirs(directory, pid)
        if replaced.is_dir() and not directory.exists():
            os.rename(replaced, directory)
        for leftover in (staging, replaced):
            shutil.rmtree(leftover, ignore_errors=True)


def write_problem_set(directory: Path, task: str, splits: dict[str, list[dict]]) -> list[Path]:
    """A task's splits as `<directory>/<split>.jsonl` with the manifest of what was written, all or nothing.

    Everything is written into a staging directory beside `directory` and published by renaming it whole, so that
    a build stopped at any moment, by SIGKILL too (which runs no handler), leaves `directory` as it was or whole
    and new; what it can leave besides is a hidden staging directory (staging_dirs) that no reader opens and the
    next build removes (sweep_build_leftovers). Files in an old `directory` that are neither a split nor the
    manifest of its build (a user's own) are copied into the new one. A failed write names the file under
    `directory`, the name the user knows. Returns the paths of the splits."""
    import shutil

    from tinygrpo.base.files import WriteError

    directory = Path(directory)
    staging, replaced = staging_dirs(directory)
    sweep_build_leftovers(directory)
    try:
        staging.mkdir(parents=True)
        written = {split: write_jsonl(rows, staging / f"{split}.jsonl") for split, rows in splits.items()}
        write_manifest(staging, task, written)
        if directory.exists():
            built = {MANIFEST, *(f"{s}.jsonl" for s in [*splits, *_manifest_splits(directory)])}
            for p in directory.iterdir():  # (copied, not moved: until the swap, the old build stays whole)
                if p.name not in built and not p.name.endswith(".tmp"):
                    _copy(p, staging / p.name)
            os.rename(directory, replaced)
        os.rename(staging, directory)  # (between the two renames, a kill is undone by the next sweep)
    except BaseException as e:
        sweep_build_leftovers(directory)  # (an interrupt between the renames puts the old build back)
        if isinstance(e, WriteError):
            name = str(e.filename).replace(str(staging), str(directory), 1)
            raise WriteError(e.errno, e.strerror, name) from e
        raise
    shutil.rmtree(replaced, ignore_errors=True)
    return [directory / f"{split}.jsonl" for split in splits]


def _copy(src: Path, dst: Path) -> None:
    """A hard link where the file system has them (no bytes copied), else a copy; a directory is copied whole."""
    import shutil

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _manifest_splits(directory: Path) -> list[str]:
    """The splits an earlier build of `directory` recorded (none when it has no readable manifest)."""
    try:
        return [str(s) for s in json.loads((directory / MANIFEST).read_text(encoding="utf-8-sig"))["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def build_mismatch(directory: Path) -> str | None:
    """None when every split the manifest of `directory` lists is there with its rows and hash (or there is no
    manifest: a directory of the user's own); else what differs, for one line."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        splits = json.loads(path.read_text(encoding="utf-8-sig"))["splits"]
        wanted = {str(k): (int(v["rows"]), str(v["sha256"])) for k, v in splits.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{path} is not a manifest this version wrote (a JSON object with 'splits')"
    for split, (rows, digest) in sorted(wanted.items()):
        f = Path(directory) / f"{split}.jsonl"
        if not f.is_file():
            return f"{f} is missing (its build wrote {rows:,} rows)"
        data = f.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            have = data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
            if have == rows:
                return f"{f} is not what its build wrote (the {rows:,} rows are there, their bytes differ)"
            return f"{f} holds {have:,} lines, not the {rows:,} rows its build wrote (cut short or changed)"
    return None


def dataset_dir(name_or_path: str) -> Path:
    """The directory a problem set is read from: the path if it is a directory, else data/<name> (which may not
    exist)."""
    path = Path(name_or_path)
    return path if path.is_dir() else DATA_DIR / name_or_path


def load_problems(name_or_path: str) -> DatasetDict:
    """Load a problem set by name (`seed_bank`, `addition`) or by a directory holding `<split>.jsonl` files."""
    path = dataset_dir(name_or_path)
    if not path.is_dir():
        where = ""
        if not DATA_DIR.is_dir():  # (a non-editable install, run from elsewhere than the repository's root)
            where = (
                f"; the built-in problem sets are looked for in {DATA_DIR}, which does not exist: run from the "
                "repository's root, set TINYGRPO_DATA_DIR, or install with pip install -e ."
            )
        raise ValueError(
            f"dataset {name_or_path!r}: no such directory (known names: {', '.join(known_names())}; or a "
            f"directory of <split>.jsonl files){where}"
        )
    files = {p.stem: str(p) for p in sorted(path.glob("*.jsonl"))}
    if not files:
        raise ValueError(f"dataset {name_or_path!r}: no <split>.jsonl files in {path}")
    if (why := build_mismatch(path)) is not None:
        task = json.loads((path / MANIFEST).read_text(encoding="utf-8-sig")).get("task")
        rebuild = (
            f"python data/build.py --task {task}" if isinstance(task, str) else "the build that wrote it"
        )
        raise ValueError(
            f"dataset {name_or_path!r}: {why}: rebuild it ({rebuild}), or delete {path / MANIFEST} to use the "
            "files as they are"
        )
    size = sum(Path(f).stat().st_size for f in files.values())
    if size > LARGE_BYTES and os.environ.get("RANK", "0") == "0":  # (seconds of work: say what it is)
        print(
            f"loading {path} ({', '.join(files)}: {size / 2**20:,.0f} MB), every row checked", file=sys.stderr
        )
    checked = {split: check_rows(Path(f)) for split, f in files.items()}
    columns = {split: types for split, (types, _) in checked.items()}
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
    return _read(files, _mixed_fields(checked))


def _mixed_fields(checked: dict[str, tuple[dict, dict[str, set[type]]]]) -> dict[str, set[str]]:
    """By split: the number fields holding integers and fractions, in that split or across splits (datasets types
    every split alike)."""
    kinds: dict[str, set[type]] = {}
    for _, numbers in checked.values():
        for k, seen in numbers.items():
            kinds.setdefault(k, set()).update(seen)
    fields = {k for k, seen in kinds.items() if len(seen) > 1}
    return {split: fields for split, (_, numbers) in checked.items() if fields & numbers.keys()}


def _read(files: dict[str, str], mixed: dict[str, set[str]]) -> DatasetDict:
    """The checked splits, read by datasets' JSON reader."""
    from datasets import load_dataset

    boms = [split for split, f in files.items() if _starts_with_bom(f)]
    if not boms and not mixed:
        return load_dataset("json", data_files=files)
    # datasets' JSON reader takes a byte-order mark for a bad value in some releases (4.7.0, the floor CI tests, among
    # them), and types a number field by the rows of its first block (an integer there, 61.5 further down fails to
    # load): those splits are read from copies, without the mark, a mixed field's integers written as decimals (1 as
    # 1.0, the same number), in a directory of their own (the loaded tables live in datasets' cache, not there).
    with tempfile.TemporaryDirectory(prefix="tinygrpo-copies-") as tmp:
        for split in {*boms, *mixed}:
            copy = Path(tmp, f"{split}.jsonl")
            if split in mixed:
                copy.write_text(_as_decimals(Path(files[split]), mixed[split]), encoding="utf-8")
            else:
                copy.write_bytes(Path(files[split]).read_bytes()[3:])
            files[split] = str(copy)
        return load_dataset("json", data_files=files)


def _as_decimals(path: Path, fields: set[str]) -> str:
    """A checked split's lines, each of `fields`' integers written as a decimal."""
    lines = []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                for k in fields:
                    if isinstance(row[k], int) and not isinstance(row[k], bool):
                        row[k] = float(row[k])
                lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return "".join(lines)


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark


def _starts_with_bom(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(3) == BOM


def check_rows(path: Path) -> tuple[dict[str, str], dict[str, set[type]]]:
    """Every line of a <split>.jsonl file, in one pass: a JSON object with the fields of the first row, each field
    of one JSON type throughout (or null), and a non-empty string prompt. Returns {field: type name} and, for each
    number field, the kinds it holds (int, float). A problem is a ValueError naming the file, the line and the
    field."""
    types: dict[str, str] = {}
    kinds: dict[str, set[type]] = {}  # (a number field's: int, float)
    rows = 0
    try:
        # utf-8-sig: a byte-order mark at the start (Windows editors write one; RFC 8259 lets a reader skip it)
        with open(path, encoding="utf-8-sig") as f:
            lines = progress(f, _count_lines(path), f"checking {path.name}")
            for n, line in enumerate(lines, 1):
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
                    if t == "a number":
                        kinds.setdefault(k, set()).add(type(v))
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
    return types, kinds


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


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


def first_row_columns(name_or_path: str, split: str) -> list[str] | None:
    """The columns of a split's first row, read from that line alone (cheap, before a large set is loaded and
    checked); None when the file is missing or its first line is not a JSON object (the full load says why)."""
    path = dataset_dir(name_or_path) / f"{split}.jsonl"
    try:
        with open(path, encoding="utf-8-sig") as f:
            row = json.loads(next((line for line in f if line.strip()), "null"))
    except (OSError, ValueError):
        return None
    return list(row) if isinstance(row, dict) else None


def load_split(name_or_path: str, split: str) -> Dataset:
    """One split of a problem set (see load_splits)."""
    return load_splits(name_or_path, split)[0]
