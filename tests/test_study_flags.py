"""The study and benchmark scripts speak one command line: --output_dir for where runs go, --seeds as a list, --jobs
for runs side by side (where a script runs several at once)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {
    # command: (has --seeds, runs several at once)
    "studies.default": (True, False),
    "studies.exploration": (True, True),
    "studies.sample_efficiency": (True, True),
    "studies.sweep": (True, True),
    "studies.tasks": (True, True),
    "studies.reasoning": (True, True),
    "studies.estimators": (False, False),
    "studies.compare": (True, False),
    "benchmarks/time_to_accuracy.py": (True, False),
}


def help_text(script: str) -> str:
    cmd = (
        [sys.executable, script, "--help"]
        if script.endswith(".py")
        else [sys.executable, "-m", script, "--help"]
    )
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_one_naming_for_output_seeds_and_jobs(script):
    text = help_text(script)
    assert "--output_dir" in text, script
    seeds, parallel = SCRIPTS[script]
    if seeds:
        assert re.search(r"--seeds SEEDS \[SEEDS \.\.\.\]", text), script  # a list, not a count
    if parallel:
        assert "--jobs" in text, script
