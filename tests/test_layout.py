"""The library's layout (tinygrpo/__init__.py): a package per stage of a step, imports pointing one way between
them, no two modules importing each other (type hints included) and no cycle, each module named in its package's
docstring, files by idea (at most 500 lines) and functions that fit a screen (at most 60 lines, a few named
exceptions)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import tinygrpo

ROOT = Path(tinygrpo.__file__).resolve().parent
REPO = ROOT.parent
# Each package may import the ones before it, never one after it. The oracles come last: nothing in the library
# imports them (only the studies and the tests do).
LAYERS = ["base", "data", "model", "algorithm", "rollout", "update", "sft", "run", "oracles"]
MAX_FUNCTION_LINES = 60
# The functions allowed past MAX_FUNCTION_LINES, each for its reason (at most five).
LONG_FUNCTIONS = {
    "tinygrpo/oracles/exact.py:exact_objective": "the exact oracle's enumeration, one formula per block",
    "tinygrpo/oracles/bandit.py:train_chapter": "the seed tutorial's chapter loop, transcribed as the tutorial has it",
}
MAX_FILE_LINES = 500


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path], typing_too: bool = False) -> set[str]:
    """The tinygrpo modules `name` imports, at module level or inside functions (a cycle hidden in a function is
    still a cycle); those under `if TYPE_CHECKING:` only with `typing_too` (they never run, but they are a
    dependency all the same)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing_too:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # (an attribute of a module: the module)
                t = t.rpartition(".")[0]
            if t and t != name and t != "tinygrpo":
                found.add(t)
    return found


def graph(typing_too: bool = False) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, typing_too) for name, path in known.items()}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_top_level_is_the_packages_of_the_stages():
    entries = {p.name for p in ROOT.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", *LAYERS}, sorted(entries)
    for package in LAYERS:
        doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"{package}/__init__.py says what it owns and what it may import"
        )


def test_every_module_is_named_in_its_packages_docstring():
    """A package's docstring names each of its modules (and subpackages), one line each: where to look for what."""
    unnamed = []
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for entry in sorted(init.parent.iterdir()):
            if entry.name in ("__init__.py", "__pycache__") or not (entry.suffix == ".py" or entry.is_dir()):
                continue
            name = entry.name if entry.suffix == ".py" else f"{entry.name}/"
            if name not in doc:
                unnamed.append(str(entry.relative_to(REPO)))
    assert unnamed == []


def test_imports_point_one_way_between_packages():
    backwards = [
        f"{a} imports {b}"
        for a, deps in graph(typing_too=True).items()
        for b in deps
        if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)
    ]
    assert backwards == [], "\n".join(sorted(backwards))


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `g` as a list of nodes (first == last), or None (depth-first search, colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m) :] + [m]
            if m not in state and (c := visit(m)):
                return c
        state[n] = 2
        path.pop()
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_two_modules_import_each_other_nor_any_cycle_type_hints_included():
    cycle = find_cycle(graph(typing_too=True))
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_find_what_they_look_for():
    """The checks above, on graphs with the defect: they would fail."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]  # two modules importing each other
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer("tinygrpo.run.trainer") > layer("tinygrpo.rollout.generation") > layer("tinygrpo.data.task")
    assert layer("tinygrpo.oracles.exact") > layer("tinygrpo.run.trainer")  # (nothing may import the oracles)
    g = graph()
    assert "tinygrpo.algorithm.core" in g["tinygrpo.update.loss"]  # (absolute imports resolved)
    assert "tinygrpo.data.task" in g["tinygrpo.data.tasks.reverse"]


def function_lengths() -> dict[str, int]:
    """Every function and method of tinygrpo by "file:name" (methods "file:Class.name"), with its lines."""
    found = {}
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for owner in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
            prefix = f"{owner.name}." if isinstance(owner, ast.ClassDef) else ""
            for node in owner.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    key = f"{path.relative_to(REPO)}:{prefix}{node.name}"
                    found[key] = node.end_lineno - node.lineno + 1
    return found


def test_every_function_fits_a_screen_but_a_few_named_ones():
    lengths = function_lengths()
    long = {k: n for k, n in lengths.items() if n > MAX_FUNCTION_LINES and k not in LONG_FUNCTIONS}
    assert long == {}, (
        f"over {MAX_FUNCTION_LINES} lines (split it, or name it in LONG_FUNCTIONS with its reason)"
    )
    assert len(LONG_FUNCTIONS) <= 5 and all(k in lengths for k in LONG_FUNCTIONS)  # (no stale exception)
    assert all(lengths[k] > MAX_FUNCTION_LINES for k in LONG_FUNCTIONS)  # (an exception still needed)


def test_no_file_is_past_500_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p in [*ROOT.rglob("*.py"), *(REPO / "tiny_lm").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


@pytest.mark.parametrize(
    "old", ["tinygrpo.core", "tinygrpo.trainer", "tinygrpo.report", "tinygrpo.rollout.nothing"]
)
def test_a_path_of_no_module_fails_to_import(old):
    """No module is kept under a path it had before (a layout of four days had no users): such a path fails as any
    missing module does."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
