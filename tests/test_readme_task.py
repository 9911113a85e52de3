"""The README's "Your task": its task file, saved as it says, trains end to end with its three commands (shrunk
to seconds by flags, which override the recipe), and the run says which reward decides held-out accuracy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def readme_task() -> tuple[str, list[str]]:
    """The task file and the commands, as the README shows them."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Your task") : text.index("## One step, token by token")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    commands = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return code, [line.split("#")[0].strip() for line in commands.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readmes_task_file_trains_end_to_end(tmp_path):
    code, commands = readme_task()
    (tmp_path / "sort_letters.py").write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TINYGRPO_DATA_DIR": str(tmp_path / "data")}
    shrink = {
        "train_sft.py": "--max_steps 30 --n_layer 1 --n_embd 32".split(),
        "train_grpo.py": "--max_steps 2 --eval_steps 1 --per_device_train_batch_size 64 --disable_tqdm true".split(),
    }
    assert [c.split()[-3 if "accelerate" in c else 1] for c in commands] == [
        "data/build.py",
        "train_sft.py",
        "train_grpo.py",
    ]
    for command in commands:
        argv = command.split()
        script = next(a for a in argv if a.endswith(".py") and not a.startswith("sort"))
        rest = argv[argv.index(script) + 1 :]  # (accelerate launch runs the script; here, python runs it)
        cmd = [sys.executable, str(REPO / script), *rest, *shrink.get(script, [])]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (command, r.stderr[-3000:])
        if script == "train_grpo.py":
            assert "decided by the reward 'exact_match' (the task sort_letters's verifier)" in r.stdout, (
                r.stdout
            )
    manifest = json.loads((tmp_path / "data" / "sort_letters" / "manifest.json").read_text())
    assert manifest["task"] == "sort_letters" and manifest["splits"]["train"]["rows"] == 5000
    assert (tmp_path / "checkpoints" / "sort_letters" / "config.json").is_file()
    summary = json.loads((tmp_path / "runs" / "sort_letters" / "summary.json").read_text())
    assert summary["steps"] == 2 and "eval/accuracy" in summary["eval_after"]
    assert not (
        REPO / "data" / "sort_letters"
    ).exists()  # (TINYGRPO_DATA_DIR: nothing written in the checkout)
