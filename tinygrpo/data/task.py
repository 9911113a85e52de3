"""A task: one small verifiable problem family, everything about it in one file under `tinygrpo/data/tasks/`.

A task names
- its problems: a seeded generator of disjoint splits (`train`, `validation`, `test`, ...), written as JSONL under
  `data/<dataset>/` by `python data/build.py` and loaded by name with `datasets` (tinygrpo/data/problems.py);
- the characters its tokenizer needs (the char tokenizer takes any alphabet);
- its verifier: `correct`, a reward registered by name (TRL's signature) that scores a completion 1.0 right or 0.0
  wrong. It decides held-out accuracy in SFT, GRPO and every study; `rewards` lists the other rewards it offers;
- its reference recipe: the `SFTConfig` fields that `python train_sft.py --task NAME` trains its reference with;
- its GRPO recipe: `configs/<name>.yaml`, run as `accelerate launch train_grpo.py --config configs/<name>.yaml`;
- optionally, kinds of problem that held-out accuracy is broken down by, and the formats a completion may take.

Adding a task is one file in `tinygrpo/data/tasks/` that calls `register_task` (its rewards registered in the same file
or in `rewards/`) plus its config; `docs/architecture.md` says how. The directory is scanned when a name is not
registered yet, as `rewards/` is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinygrpo.data import problems
from tinygrpo.data.problems import DATA_DIR, MANIFEST, write_problem_set

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
# The reference recipes whose results (docs/tasks.md, reasoning.md, tools.md) were measured on references trained on
# the machine's own kernels keep them, so that those results stay theirs; a new recipe trains on the portable ones
# (SFTConfig's default: the same reference on every x86-64 CPU).
NATIVE_KERNELS = {"kernels": "native"}

Splits = dict[str, list[dict]]


@dataclass(frozen=True)
class Formats:
    """The forms a task's completion may take (a direct answer, a worked one): the held-out evaluation and the
    step's metrics report the share of each and the accuracy within each."""

    names: tuple[str, ...]  # every name `of` can return, in the order they are reported
    of: Callable[[str], str]  # a completion (decoded, <eos> kept) -> its format's name


@dataclass(frozen=True)
class Task:
    name: str
    summary: str  # one line: what the model is asked and what it must answer
    build: Callable[[], Splits]  # the problems, split (deterministic: the same rows on every call)
    chars: str  # the tokenizer's characters (besides <pad> and <eos>)
    config: str = ""  # the GRPO recipe, a YAML file (a path from the repository root); "" = `grpo` alone
    correct: str = "accuracy"  # the registered reward that decides right (1.0) or wrong (0.0)
    rewards: tuple[str, ...] = ()  # other registered rewards the task defines (partial credit, format, ...)
    reference: dict[str, Any] | None = (
        None  # SFTConfig fields of the reference recipe; None: no reference of its own
    )
    dataset: str = ""  # the directory under data/ ("" = the task's name)
    kinds: Callable[[dict[str, list]], dict[str, list[bool]]] | None = None  # rows -> {kind: which rows}
    formats: Formats | None = None  # the forms a completion may take
    grpo: dict[str, Any] | None = (
        None  # GRPOConfig fields of its GRPO recipe, over `config`'s (a one-file task)
    )

    def __post_init__(self) -> None:
        if not self.dataset:
            object.__setattr__(self, "dataset", self.name)

    @property
    def target(self) -> str:
        """The column whose text is a right completion: what its reference imitates (`answer` unless its recipe's
        completion_column says otherwise)."""
        return (self.reference or {}).get("completion_column", "answer")

    @property
    def data_dir(self) -> Path:
        return DATA_DIR / self.dataset

    def ensure_data(self, say: Callable[[str], None] = print) -> None:
        """Write the task's problem files under data/ if they are not there (a family's tasks are not committed), or
        if a family's build never finished (its splits without the manifest a build writes last). A committed task's
        files without a manifest are the user's, and used as they are."""
        exists = any(self.data_dir.glob("*.jsonl"))
        unfinished = exists and ":" in self.name and not (self.data_dir / MANIFEST).is_file()
        if not exists or unfinished:
            if unfinished:
                say(f"{self.data_dir}: an unfinished build (no {MANIFEST}): writing it again")
            self.write()

    def write(self, out_dir: Path | None = None) -> list[Path]:
        """Write the task's splits as `<out_dir>/<dataset>/<split>.jsonl` with the manifest of what was written,
        all or nothing (problems.write_problem_set); returns the paths."""
        directory = Path(out_dir if out_dir is not None else DATA_DIR) / self.dataset
        try:  # (before anything is touched: a generator that fails leaves the old build)
            splits = self.build()
        except Exception as e:  # noqa: BLE001  (a task's own code: said in one line, whichever entry point)
            raise ValueError(f"task {self.name}: its build() failed: {type(e).__name__}: {e}") from None
        return write_problem_set(directory, self.name, splits)


TASKS: dict[str, Task] = {}
# Families of tasks made on demand, by prefix: "reasoning_gym:chain_sum" -> TASK_FAMILIES["reasoning_gym"]("chain_sum").
# A family's tasks keep their data under data/<prefix>_<name>/.
TASK_FAMILIES: dict[str, Callable[[str], Task]] = {}


def register_task_family(prefix: str, make: Callable[[str], Task]) -> None:
    """Tasks named `<prefix>:<name>`, each made by `make(name)` when first asked for (ValueError for a bad name)."""
    TASK_FAMILIES[prefix] = make


def register_task(task: Task) -> Task:
    """Add a task to the registry (a module calls this at import). A second task under a taken name is an error."""
    old = TASKS.get(task.name)
    if old is not None and old.build.__module__ != task.build.__module__:
        raise ValueError(
            f"task name {task.name!r} is already registered by {old.build.__module__}: give this one another name"
        )
    TASKS[task.name] = task
    return task


def discover_tasks() -> None:
    """Import every module of tinygrpo/data/tasks/ (names starting with `_` skipped), registering their tasks."""
    for path in sorted(TASKS_DIR.glob("*.py")):
        if not path.stem.startswith("_"):
            importlib.import_module(f"{__package__}.tasks.{path.stem}")


def task_names() -> list[str]:
    """The registered tasks (a family's appear once asked for)."""
    discover_tasks()
    return sorted(TASKS)


def load_task_file(path: str, name: str | None = None) -> Task:
    """The task a file of the user's registers (`--task my_task.py`, or `my_task.py:NAME` when it registers
    several): the file is imported once, by path, and calls `register_task` as a built-in task's file does."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--task {path}: no such file")
    discover_tasks()  # (the built-in tasks first: a file's task under one of their names is refused, not theirs)
    built_in = {t.name: t for t in TASKS.values()}
    before = set(TASKS)
    module = f"tinygrpo_user_task_{abs(hash(str(p.resolve())))}"
    if module not in sys.modules:
        spec = importlib.util.spec_from_file_location(module, p)
        code = importlib.util.module_from_spec(spec)
        sys.modules[module] = code
        try:
            spec.loader.exec_module(code)
        except Exception as e:  # noqa: BLE001  (the user's file: say which and why, in one line)
            del sys.modules[module]
            raise ValueError(f"--task {path}: importing it failed: {type(e).__name__}: {e}") from None
    mine = [t for n, t in TASKS.items() if n not in before or t.build.__module__ == module]
    if name is not None:
        mine = [t for t in mine if t.name == name]
    if len(mine) != 1:
        names = ", ".join(t.name for t in mine) or "none"
        raise ValueError(
            f"--task {path}: expected it to register one task{f' named {name!r}' if name else ''} with "
            f"register_task(Task(...)), it registered: {names}"
        )
    task = mine[0]
    # Its problems go to data/<dataset>: never a built-in task's (a build would overwrite the committed files).
    clash = next((t for t in built_in.values() if t.dataset == task.dataset and t.name != task.name), None)
    if clash is not None:
        raise ValueError(
            f"--task {path}: its task {task.name!r} writes its problems to {DATA_DIR / task.dataset}, the built-in "
            f"task {clash.name!r}'s: give it another name (or dataset)"
        )
    return task


def get_task(name: str) -> Task:
    """The task `name` names: a registered one (`reverse`), a family's (`reasoning_gym:chain_sum`), a file's
    (`path/to/my_task.py`, `my_task.py:NAME`) or a module's (`mypkg.tasks:NAME`); a ValueError listing the known
    tasks otherwise."""
    head, _, tail = name.partition(":")
    if head.endswith(".py") or (name.endswith(".py") and not tail):
        return load_task_file(head, tail or None)
    if tail and head not in TASK_FAMILIES:
        discover_tasks()  # (the families register with the built-in tasks)
    if tail and head not in TASK_FAMILIES:  # module:NAME
        try:
            importlib.import_module(head)
        except ImportError as e:
            families = "".join(
                f", {p}:NAME" for p in sorted(TASK_FAMILIES)
            )  # (a family's name mistyped, likely)
            raise ValueError(
                f"unknown task {name!r} (known tasks: {', '.join(task_names())}{families}; or module:NAME for a "
                f"module that registers the task NAME, and {head!r} cannot be imported: {e})"
            ) from None
        if tail not in TASKS:
            raise ValueError(f"--task {name}: importing {head!r} registered no task named {tail!r}")
        return TASKS[tail]
    if name not in TASKS:
        discover_tasks()
    prefix, sep, member = name.partition(":")
    if name not in TASKS and sep and prefix in TASK_FAMILIES:
        register_task(TASK_FAMILIES[prefix](member))
    if name not in TASKS:
        families = "".join(f", {p}:NAME" for p in sorted(TASK_FAMILIES))
        raise ValueError(f"unknown task {name!r} (known tasks: {', '.join(task_names())}{families})")
    return TASKS[name]


def task_of_dataset(dataset: str) -> Task | None:
    """The task whose problems `dataset` names (`multiplication` or `data/multiplication`), if any: its verifier
    decides held-out accuracy. A dataset shared by several tasks (formats of one problem set) gives the first by
    name (the one named like the dataset: `addition_long`); a run of another format names its task (`task:` in its
    recipe), whose verifier then decides. None for a directory of the user's own."""
    discover_tasks()
    path = Path(dataset)
    for task in sorted(TASKS.values(), key=lambda t: t.name):
        if dataset == task.dataset or (path.is_dir() and path.resolve() == task.data_dir):
            return task
    name = path.name if path.is_dir() and path.resolve().parent == DATA_DIR else dataset
    for prefix in TASK_FAMILIES:  # a family's data directory, data/<prefix>_<name>
        if name.startswith(prefix + "_"):
            try:
                return get_task(f"{prefix}:{name[len(prefix) + 1 :]}")
            except ValueError:
                return None
    return None


def task_of_reference(path: str) -> Task | None:
    """The task whose reference recipe saves to `path` (as written in a config: `checkpoints/multiplication`), if
    any: the GRPO entry point trains it first when it is missing."""
    discover_tasks()
    for task in sorted(TASKS.values(), key=lambda t: t.name):
        if task.reference is not None and Path(task.reference.get("output_dir", "")) == Path(path):
            return task
    return None


def build_data(names: Sequence[str] | None = None, out_dir: Path | None = None) -> list[Path]:
    """Write the committed problem files of the named tasks (default: every built-in task, not a family's, whose
    data are made on first use); returns the paths. Tasks that share a dataset write it once."""
    written: list[Path] = []
    done: set[str] = set()
    for name in names if names is not None else [n for n in task_names() if ":" not in n]:
        task = get_task(name)
        if task.dataset not in done:
            done.add(task.dataset)
            written += task.write(out_dir)
    return written


def dataset_names() -> list[str]:
    """The built-in problem sets: the tasks' (tinygrpo/data/tasks/), and a task family's by its pattern."""
    discover_tasks()
    fixed = sorted({t.dataset for t in TASKS.values() if ":" not in t.name})
    return fixed + [f"{prefix}_NAME" for prefix in sorted(TASK_FAMILIES)]


problems.known_names = dataset_names  # (the registry names the sets; problems.py cannot import it)
