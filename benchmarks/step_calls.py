"""How many distinct functions of the repository one plain training step calls, and which files read `beta`.

    python benchmarks/step_calls.py --model /tmp/refs/addition
    python benchmarks/step_calls.py --model /tmp/refs/addition --verbose --json /tmp/step_calls.json

Runs configs/plain.yaml for 3 steps in this process (train_grpo.main; evaluation, logging of completions, checkpoints
and the forecast kept out of the steps), with GRPOTrainer.training_step wrapped in cProfile (on at entry, off at exit,
accumulated over the 3 steps). It counts the profiled functions whose file lies under tinygrpo/, tiny_lm/ or rewards/
and their files (--verbose lists them by file, with call counts). "Files that read beta": the files under tinygrpo/
whose AST holds an attribute `.beta` or a name `beta` (exactly that identifier); beside them, the files where the word
appears at all (comments and docstrings too). Text out; --json FILE as well.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import functools
import importlib
import json
import os
import pkgutil
import pstats
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's modules, not an installed copy's
    sys.path.insert(0, str(ROOT))
PACKAGES = ("tinygrpo", "tiny_lm", "rewards")
COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
STEPS = 3


def trainer_class() -> type:
    """GRPOTrainer where it is now (tinygrpo.run.trainer), or wherever in tinygrpo it has moved."""
    try:
        from tinygrpo.run.trainer import GRPOTrainer

        return GRPOTrainer
    except ImportError:
        pass
    import tinygrpo

    for info in pkgutil.walk_packages(tinygrpo.__path__, "tinygrpo."):
        try:
            module = importlib.import_module(info.name)
        except Exception:  # (a module that cannot be imported alone holds no trainer to run)
            continue
        cls = getattr(module, "GRPOTrainer", None)
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            return cls
    raise SystemExit("no class GRPOTrainer found in tinygrpo")


def profile_steps(model: str, threads: int) -> pstats.Stats:
    """Run 3 plain steps in process, profiling only inside training_step."""
    import torch

    import tinygrpo
    import train_grpo

    if not Path(tinygrpo.__file__).resolve().is_relative_to(ROOT):
        raise SystemExit(f"tinygrpo imported from {tinygrpo.__file__}, not from {ROOT}")
    torch.set_num_threads(threads)
    cls = trainer_class()
    profiler = cProfile.Profile()
    original = cls.training_step

    @functools.wraps(original)
    def profiled(self, *args, **kwargs):
        profiler.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            profiler.disable()

    cls.training_step = profiled
    try:
        with tempfile.TemporaryDirectory(prefix="step_calls_") as tmp:
            argv = (
                f"--config configs/plain.yaml --max_steps {STEPS} --logging_steps 1000 --eval_steps 1000 "
                f"--save_steps 0 --signal_forecast_prompts 0 --make_plots false --make_report false "
                f"--disable_tqdm true --torch_num_threads {threads}"
            ).split()
            argv += ["--model_name_or_path", model, "--output_dir", str(Path(tmp) / "run")]
            cwd = Path.cwd()
            os.chdir(ROOT)  # (the recipe's relative paths)
            try:
                rc = train_grpo.main(argv)
            finally:
                os.chdir(cwd)
            if rc:
                raise SystemExit(f"the run failed (rc {rc})")
    finally:
        cls.training_step = original
    return pstats.Stats(profiler)


def repo_functions(stats: pstats.Stats) -> dict[str, list[tuple[str, int, int]]]:
    """{file relative to the repository: [(function, line, calls)]} for the profiled functions in PACKAGES."""
    roots = [(ROOT / p).resolve() for p in PACKAGES]
    by_file: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for (filename, line, name), (_, calls, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        path = Path(filename).resolve()
        if any(path.is_relative_to(r) for r in roots):
            by_file[str(path.relative_to(ROOT))].append((name, line, calls))
    return {f: sorted(v, key=lambda x: x[1]) for f, v in sorted(by_file.items())}


def beta_files() -> list[str]:
    """Files under tinygrpo/ whose AST has an attribute `.beta` or a name `beta`."""
    found = []
    for path in sorted((ROOT / "tinygrpo").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if any(
            (isinstance(n, ast.Attribute) and n.attr == "beta")
            or (isinstance(n, ast.Name) and n.id == "beta")
            for n in ast.walk(tree)
        ):
            found.append(str(path.relative_to(ROOT)))
    return found


def beta_word_files() -> list[str]:
    """Files under tinygrpo/ where the word `beta` appears anywhere, comments and docstrings too (`grep -lw`)."""
    word = re.compile(r"\bbeta\b")
    return [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tinygrpo").rglob("*.py"))
        if word.search(p.read_text())
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default="/tmp/refs/addition", help="the plain run's model_name_or_path")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--verbose", action="store_true", help="list the functions by file, with call counts")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    files = repo_functions(profile_steps(str(Path(args.model).resolve()), args.threads))
    betas, words = beta_files(), beta_word_files()
    comprehensions = sum(n in COMPREHENSIONS for v in files.values() for n, _, _ in v)
    result: dict[str, Any] = {
        "steps": STEPS,
        "functions": sum(len(v) for v in files.values()),
        "comprehensions": comprehensions,  # (Python 3.11 profiles each as a function of its own; 3.12 inlines them)
        "files": len(files),
        "beta_files": len(betas),
        "beta_file_list": betas,
        "beta_word_files": words,
        "by_file": {f: [{"function": n, "line": ln, "calls": c} for n, ln, c in v] for f, v in files.items()},
    }
    print(
        f"one plain step ({STEPS} profiled): {result['functions']} distinct functions in {result['files']} files "
        f"under {', '.join(p + '/' for p in PACKAGES)} ({result['functions'] - comprehensions} without the "
        f"{comprehensions} comprehensions' own frames)"
    )
    for f, funcs in files.items():
        print(f"  {f}: {len(funcs)}")
        if args.verbose:
            for name, line, calls in funcs:
                print(f"      {name}:{line}  x{calls}")
    print(f"files that read beta: {len(betas)}")
    for f in betas:
        print(f"  {f}")
    extra = [f for f in words if f not in betas]
    print(
        f"files with the word beta anywhere (comments too): {len(words)}"
        + (f"; also {', '.join(extra)}" if extra else "")
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
