"""The library's layout (tinygrpo/__init__.py): a package per stage of a step, imports pointing one way between
them, no import cycle between modules, no file past 400 lines, and the old module paths still importing."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tinygrpo

ROOT = Path(tinygrpo.__file__).resolve().parent
REPO = ROOT.parent
# Each package may import the ones before it, never one after it.
LAYERS = ["data", "model", "algorithm", "rollout", "update", "run"]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tinygrpo modules `name` imports, at module level or inside functions (a cycle hidden in a function is
    still a cycle); not those under `if TYPE_CHECKING:`, which never run."""
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
        if id(node) in typing_only:
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


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_top_level_is_the_packages_of_the_stages():
    entries = {p.name for p in ROOT.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", *LAYERS} and len(entries) <= 8, sorted(entries)
    for package in LAYERS:
        doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"{package}/__init__.py says what it owns and what it may import"
        )


def test_imports_point_one_way_between_packages():
    backwards = [
        f"{a} imports {b}"
        for a, deps in graph().items()
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


def test_no_import_cycle_between_modules():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_find_what_they_look_for():
    """The two checks above, on graphs with the defect: they would fail."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer("tinygrpo.run.trainer") > layer("tinygrpo.rollout.generation") > layer("tinygrpo.data.task")
    g = graph()
    assert "tinygrpo.algorithm.core" in g["tinygrpo.update.loss"]  # (relative imports resolved)
    assert "tinygrpo.data.task" in g["tinygrpo.data.tasks.reverse"]  # (absolute ones too)


def test_no_file_is_past_400_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p in [*ROOT.rglob("*.py"), *(REPO / "tiny_lm").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}


@pytest.mark.parametrize("old", sorted(tinygrpo.MOVED))
def test_an_old_module_path_imports_the_module_at_its_new_place(old, monkeypatch):
    # imported afresh: the warning is said
    monkeypatch.delitem(sys.modules, f"tinygrpo.{old}", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        was = importlib.import_module(f"tinygrpo.{old}")
    new = importlib.import_module(f"tinygrpo.{tinygrpo.MOVED[old]}")
    assert was is new and new.__spec__.name == new.__name__ == f"tinygrpo.{tinygrpo.MOVED[old]}"
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert said == [f"tinygrpo.{old} is now tinygrpo.{tinygrpo.MOVED[old]}"], said


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (said on each old path: what the test imports)
def test_the_old_names_users_wrote_still_work():
    from tinygrpo.advantage_estimators import ADV_ESTIMATORS, register_adv_est
    from tinygrpo.core import group_advantages
    from tinygrpo.policy_losses import POLICY_LOSSES, register_policy_loss
    from tinygrpo.task import Task, register_task
    from tinygrpo.tasks._splits import split_rows
    from tinygrpo.trainer import GRPOTrainer

    from tinygrpo.algorithm import advantage_estimators, core, policy_losses
    from tinygrpo.data import task
    from tinygrpo.model import text
    from tinygrpo.rollout import SamplingParams, decode_rows, sample_completions
    from tinygrpo.run import trainer
    from tinygrpo.update import PolicyUpdate

    assert (group_advantages, ADV_ESTIMATORS, register_adv_est) == (
        core.group_advantages,
        advantage_estimators.ADV_ESTIMATORS,
        advantage_estimators.register_adv_est,
    )
    assert (POLICY_LOSSES, register_policy_loss) == (
        policy_losses.POLICY_LOSSES,
        policy_losses.register_policy_loss,
    )
    assert (Task, register_task, GRPOTrainer, decode_rows) == (
        task.Task,
        task.register_task,
        trainer.GRPOTrainer,
        text.decode_rows,
    )
    from tinygrpo.rollout import sampling

    assert sample_completions.__module__ == "tinygrpo.rollout.sampling"
    assert (
        SamplingParams.__module__ == "tinygrpo.rollout.sampler" and sampling.SamplingParams is SamplingParams
    )
    assert PolicyUpdate.__module__ == "tinygrpo.update.policy_update" and callable(split_rows)
    with pytest.raises(ImportError):
        from tinygrpo.rollout import no_such_name  # noqa: F401


@pytest.mark.slow
def test_python_m_runs_a_module_by_its_old_path(tmp_path):
    new = subprocess.run(
        [sys.executable, "-m", "tinygrpo.run.report", "--help"], capture_output=True, text=True, cwd=REPO
    )
    old = subprocess.run(
        [sys.executable, "-m", "tinygrpo.report", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert (
        new.returncode == old.returncode == 0 and old.stdout == new.stdout and "RUN_DIR" in new.stdout.upper()
    )
