"""Reliability of train_grpo: kill/resume exactness, determinism, nothing lost, numerical faults, bad input, safe loading.

Every run is tiny (the 36 seed-bank prompts, the session's 26 k-parameter `seed_reference`, 32 completions of <= 3
tokens per step), so a step takes ~15-50 ms; most of the time goes into starting Python subprocesses (~5-10 s each
on a loaded 2-core machine), which the kill and Ctrl-C tests need: a real SIGKILL / SIGINT to a real process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _runs import ENV, LAUNCH, LAUNCH_ENV, REPO, TWO_CPU_PROCESSES, cli, run_inproc, snapshot
from safetensors.torch import load_file

from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run.logs import TIMING_PREFIXES, read_jsonl

# The kill/resume runs: long enough (N steps of ~15-50 ms) that a poller catches the run mid-way after its first
# checkpoints; every step logged, so that resume has lines to truncate.
N_STEPS = 150
LONG = ("--max_steps", str(N_STEPS), "--save_steps", "3", "--logging_steps", "1", "--eval_steps", "25")


# ================================================================================================ helpers


def start(ref: str, out: Path, *extra: str, tag: str = "run") -> subprocess.Popen:
    """`python train_grpo.py ...` as a real process; stdout/stderr go to files next to output_dir (no pipe can
    fill up and stall it)."""
    logs = out.parent / f"{out.name}.{tag}"
    return subprocess.Popen(
        [sys.executable, "train_grpo.py", *cli(ref, out, *extra)],
        cwd=REPO,
        env=ENV,
        stdout=open(f"{logs}.out", "w"),
        stderr=open(f"{logs}.err", "w"),
        text=True,
    )


def stderr_of(out: Path, tag: str = "run") -> str:
    return Path(f"{out.parent / out.name}.{tag}.err").read_text()


def last_step(out: Path) -> int:
    """The step of the last complete line of metrics.jsonl (-1 if none); safe while the file is being appended."""
    path = out / "metrics.jsonl"
    if not path.is_file():
        return -1
    for line in reversed(path.read_text().splitlines()):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return -1


def latest_step(out: Path) -> int:
    found = ckpt.checkpoint_dirs(out)
    return int(found[-1].name.split("-")[1]) if found else -1


def wait_for(cond: Callable[[], bool], proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    """Poll every 5 ms until cond() holds; fail if the process ends first (then the run was too short)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc={proc.returncode}) before {what}: raise N_STEPS")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def sigkill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (
        f"the run ended by itself (rc={proc.returncode}): raise N_STEPS"
    )


def stripped_metrics(out: Path) -> list[str]:
    """metrics.jsonl without the timing keys (the only ones allowed to differ), each line re-serialised sorted."""
    return [
        json.dumps({k: v for k, v in row.items() if not k.startswith(TIMING_PREFIXES)}, sort_keys=True)
        for row in read_jsonl(out / "metrics.jsonl")
    ]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys() and wa
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert different == [], f"tensors differ: {different}"


def assert_same_run(out: Path, reference: Path) -> None:
    """Same metrics (timings aside), same sampled completions, same final weights, bit for bit."""
    got, want = stripped_metrics(out), stripped_metrics(reference)
    assert len(got) == len(want) and got == want
    assert (out / "completions.jsonl").read_bytes() == (reference / "completions.jsonl").read_bytes()
    assert_same_weights(out / "final", reference / "final")


# (the learning-rate scheduler's state is JSON inside STATE_FILE)
CHECKPOINT_FILES = {
    "model.safetensors",
    "optimizer.bin",
    "random_states_0.pkl",
    "batch_generator_0.json",  # the sampler's RNG and the prompt cursor (its tensors: .safetensors beside it)
    ckpt.STATE_FILE,
}


def assert_checkpoints_sound(out: Path) -> None:
    """Every checkpoint that checkpoint_dirs() lists is complete and loadable, and `latest` is the newest of them."""
    found = ckpt.checkpoint_dirs(out)
    assert found, f"no complete checkpoint in {sorted(p.name for p in out.iterdir())}"
    for p in found:
        names = {f.name for f in p.iterdir()}
        assert names >= CHECKPOINT_FILES, (p, sorted(names))
        state = json.loads((p / ckpt.STATE_FILE).read_text())
        assert p.name == f"checkpoint-{state['trainer']['step']}"
        # A complete safetensors file (loading checks the header against the file size).
        assert load_file(str(p / "model.safetensors"))
        json.loads((p / "batch_generator_0.json").read_text())
        assert (
            json.loads((p / ckpt.STATE_FILE).read_text())["optimizer_step"]["scheduler"]["_step_count"] >= 1
        )
        for name in ("optimizer.bin", "random_states_0.pkl"):
            torch.load(p / name, weights_only=False)  # complete pickles (trusted: we just wrote them)
    latest = ckpt.resolve_checkpoint("latest", out)
    assert latest == found[-1] and not latest.name.startswith(".")


# ================================================================================================ fixtures


@pytest.fixture(scope="module")
def straight_run(seed_reference, tmp_path_factory) -> Path:
    """Run A: the uninterrupted N-step run that every interrupted-and-resumed run must reproduce exactly."""
    out = tmp_path_factory.mktemp("straight") / "a"
    assert run_inproc(seed_reference, out, *LONG) == 0
    assert last_step(out) == N_STEPS
    return out


# ================================================================================================ 1. kill / resume


@pytest.mark.slow
@pytest.mark.kills
def test_sigkill_after_a_checkpoint_then_resume_is_exact(seed_reference, straight_run, tmp_path):
    out = tmp_path / "b"
    proc = start(seed_reference, out, *LONG)
    # Kill once checkpoint-6 (or a later one) exists AND a few steps past it are logged: resume must drop them.
    wait_for(
        lambda: latest_step(out) >= 6 and last_step(out) >= latest_step(out) + 2,
        proc,
        "checkpoint-6, +2 steps",
    )
    sigkill(proc)
    killed_at, resumed_from = last_step(out), latest_step(out)
    assert 6 <= resumed_from < killed_at < N_STEPS
    assert_checkpoints_sound(out)

    proc = start(seed_reference, out, *LONG, "--resume_from_checkpoint", "latest", tag="resume")
    assert proc.wait(timeout=300) == 0, stderr_of(out, "resume")
    assert f"at step {resumed_from}" in Path(f"{out}.resume.out").read_text()
    assert_same_run(out, straight_run)


@pytest.mark.slow
@pytest.mark.kills
def test_sigkills_at_random_moments_leave_only_complete_checkpoints(seed_reference, straight_run, tmp_path):
    """save_steps=1: a checkpoint is written every step, so a SIGKILL at a random moment often lands inside a save
    (publish, prune, fsync). After every kill, checkpoint_dirs() may only list complete, loadable checkpoints and
    `latest` is the newest of them; after all the kills, the resumed run still equals the uninterrupted one."""
    out = tmp_path / "k"
    rng = random.Random(1234)
    saw_tmp = []
    for attempt in range(2):
        before = latest_step(out)
        resume = ("--resume_from_checkpoint", "latest") if attempt else ()
        proc = start(seed_reference, out, *LONG, "--save_steps", "1", *resume, tag=f"kill{attempt}")
        wait_for(lambda b=before: latest_step(out) > b + 1, proc, f"a new checkpoint after {before}")
        time.sleep(rng.uniform(0.0, 0.3))
        sigkill(proc)
        saw_tmp.append(sorted(p.name for p in out.glob(".tmp-checkpoint-*")))
        assert_checkpoints_sound(out)
        assert latest_step(out) > before
    print(f"leftover .tmp-checkpoint-* after each kill: {saw_tmp}")

    # A leftover of an interrupted save, even one holding a state file, never counts; nor does a checkpoint-<n>
    # without its state file (not published by rename, e.g. a partial copy).
    newest = latest_step(out)
    leftover = out / f".tmp-checkpoint-{newest + 100}"
    shutil.copytree(ckpt.checkpoint_dirs(out)[-1], leftover, dirs_exist_ok=True)
    (out / f"checkpoint-{newest + 200}").mkdir()
    assert ckpt.resolve_checkpoint("latest", out) == out / f"checkpoint-{newest}"

    rc = run_inproc(seed_reference, out, *LONG, *"--save_steps 1 --resume_from_checkpoint latest".split())
    assert rc == 0
    assert not leftover.exists()  # the next save's prune removes leftovers
    assert_same_run(out, straight_run)


@pytest.mark.slow
def test_kill_while_pruning_leaves_no_half_deleted_checkpoint(seed_reference, tmp_path, monkeypatch):
    """Deterministic stand-in for a SIGKILL that lands inside prune()'s rmtree: the simulated kill happens after
    the first file of the old checkpoint is gone (rmtree's order is the directory's order; here: the weights)."""
    out = tmp_path / "p"
    assert (
        run_inproc(
            seed_reference,
            out,
            *"--max_steps 4 --save_steps 2 --save_total_limit 1 --dataset_test_split".split(),
            "",
        )
        == 0
    )
    assert [p.name for p in ckpt.checkpoint_dirs(out)] == ["checkpoint-4"]
    old = out / "checkpoint-2"
    shutil.copytree(out / "checkpoint-4", old)
    state = json.loads((old / ckpt.STATE_FILE).read_text())
    (old / ckpt.STATE_FILE).write_text(json.dumps({**state, "step": 2}))

    class Killed(BaseException):
        pass

    def dying_rmtree(path, *a, **k):
        (Path(path) / "model.safetensors").unlink()
        raise Killed

    monkeypatch.setattr(ckpt.shutil, "rmtree", dying_rmtree)
    with pytest.raises(Killed):
        ckpt.prune(out, keep=1)
    monkeypatch.undo()
    for p in ckpt.checkpoint_dirs(out):
        assert (p / "model.safetensors").is_file(), f"{p.name} is listed as complete but has no weights"


# ================================================================================================ 2. determinism


@pytest.mark.slow
def test_same_seed_same_run_different_seed_different_run(seed_reference, tmp_path):
    short = ("--max_steps", "8", "--save_steps", "4", "--logging_steps", "1", "--eval_steps", "4")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert run_inproc(seed_reference, a, *short) == 0
    assert run_inproc(seed_reference, b, *short) == 0
    assert run_inproc(seed_reference, c, *short, "--seed", "7") == 0
    assert len(stripped_metrics(a)) == 1 + 8  # the step-0 evaluation, then one row per step
    assert stripped_metrics(a) == stripped_metrics(b)  # identical JSON lines once timings are dropped
    assert_same_run(a, b)
    assert_same_weights(a / "checkpoint-4", b / "checkpoint-4")
    assert stripped_metrics(a)[1:] != stripped_metrics(c)[1:]  # (step 0 is greedy evaluation: seed-free)
    wa, wc = load_file(str(a / "final/model.safetensors")), load_file(str(c / "final/model.safetensors"))
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


# ================================================================================================ 3. nothing lost


@pytest.mark.slow
def test_second_run_into_the_same_output_dir_is_refused_and_changes_nothing(seed_reference, tmp_path, capfd):
    out = tmp_path / "run"
    rc = run_inproc(seed_reference, out, *"--max_steps 3 --save_steps 2 --logging_steps 1".split())
    assert rc == 0
    before = snapshot(out)
    assert {
        "metrics.jsonl",
        "completions.jsonl",
        "config.json",
        "summary.json",
        "final/model.safetensors",
        "checkpoint-2/model.safetensors",
    } <= before.keys()
    capfd.readouterr()

    assert run_inproc(seed_reference, out, *"--max_steps 5 --seed 3".split()) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--overwrite_output_dir" in err[0], err
    assert snapshot(out) == before  # byte-identical, nothing added or removed

    assert (
        run_inproc(
            seed_reference,
            out,
            *"--max_steps 5 --seed 3 --logging_steps 1 --overwrite_output_dir true".split(),
        )
        == 0
    )
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == list(range(6))  # only the new run's rows
    assert not (out / "checkpoint-2").exists()  # the old run's checkpoints are gone, not mixed in


@pytest.mark.slow
@pytest.mark.kills
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_at_a_step_boundary_saves_and_resumes(seed_reference, straight_run, tmp_path, sig):
    out = tmp_path / "i"
    proc = start(seed_reference, out, *LONG)
    wait_for(lambda: last_step(out) >= 4, proc, "step 4")
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=120) == 130
    err = stderr_of(out)
    assert "--resume_from_checkpoint" in err and "Traceback" not in err, err
    stopped = last_step(out)
    assert 4 <= stopped < N_STEPS
    assert latest_step(out) == stopped  # the checkpoint is at the step the run stopped after
    assert_checkpoints_sound(out)
    assert not (out / "final").exists()

    assert run_inproc(seed_reference, out, *LONG, "--resume_from_checkpoint", "latest") == 0
    assert_same_run(out, straight_run)


END_FILES = ("final", "report.html", "summary.json", "plots.png")


@pytest.mark.slow
@pytest.mark.kills
@pytest.mark.parametrize("moment", ["mid_run", "after_the_last_step"])
def test_sigterm_at_any_moment_up_to_the_last_write_ends_whole(seed_reference, tmp_path, moment):
    """A SIGTERM mid-run stops at a step boundary with a checkpoint (exit 130); one after the last step is taken
    while the end-of-run writes are finished first, and said (exit 0): final/, the plots, the report and
    summary.json are all there either way the run ends, and a run that exits 0 has all of them. The moment after
    the last step is drawn at random, repeated: at once, then during the end writes."""
    rng = random.Random({"mid_run": 1, "after_the_last_step": 3}[moment])
    # mid-run: a SIGTERM after step 2-9 of N_STEPS, so that the run cannot end first however late the signal lands
    # on a loaded machine (with 12 steps it could: 3 steps are ~0.1 s)
    steps = N_STEPS if moment == "mid_run" else 12
    for attempt in range(2 if moment == "mid_run" else 3):
        out = tmp_path / f"{moment}{attempt}"
        flags = (
            "--max_steps",
            str(steps),
            "--logging_steps",
            "1",
            "--eval_steps",
            "4",
            "--make_plots",
            "true",
        )
        proc = start(seed_reference, out, *flags, tag="t")
        target = rng.randint(2, 9) if moment == "mid_run" else steps
        wait_for(lambda t=target, o=out: last_step(o) >= t, proc, f"step {target}")
        if moment == "after_the_last_step" and attempt > 0:
            time.sleep(rng.uniform(0.0, 0.4))  # the checkpoint, final/, plots, report, summary: ~0.5-2 s
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=120)
        err = stderr_of(out, "t")
        assert "Traceback" not in err, err
        if moment == "mid_run":
            assert rc == 130 and "--resume_from_checkpoint" in err, (rc, err)
            assert_checkpoints_sound(out)
            assert not (out / "final").exists() and (out / "report.html").exists()
            continue
        # After the last step: the run is whole. (A SIGTERM that lands after its last write, while Python exits,
        # may still end it with -15: by then there is nothing left to write.)
        assert rc in (0, -signal.SIGTERM), (rc, err)
        assert "stopping after this step" not in err, err  # (no step is left to stop after: it says so)
        assert all((out / f).exists() for f in END_FILES), sorted(p.name for p in out.iterdir())
        assert json.loads((out / "summary.json").read_text())["steps"] == steps
        if rc == 0 and "the end-of-run writes were finished first" not in err:
            assert (
                "outputs in" in (out.parent / f"{out.name}.t.out").read_text()
            )  # it ended before the signal


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_end_writes_names_what_is_missing(
    seed_reference, tmp_path, monkeypatch, capfd
):
    """Only a second Ctrl-C stops the end-of-run writes: the line names the files not written, the checkpoint kept,
    and the command that writes the report from the run's logs (which then works)."""
    from tinygrpo.run import checkpoint as run_end

    def interrupted(run_dir, figures=True):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_end, "write_report", interrupted)
    out = tmp_path / "r"
    assert run_inproc(seed_reference, out, "--max_steps", "3", "--make_plots", "false") == 130
    err = capfd.readouterr().err
    assert "interrupted during the end-of-run writes: report.html, summary.json not written" in err, err
    assert f"python -m tinygrpo.run.report {out}" in err and "checkpoint-3" in err
    assert (out / "final").is_dir() and not (out / "summary.json").exists()
    from tinygrpo.run.report import main as report_main

    assert report_main([str(out)]) == 0 and (out / "report.html").exists()


# ================================================================================================ 4. numerical faults
# A reliable non-finite loss: rewards are checked to be finite, but a finite 1e38 / 3e38 is allowed. With
# advantage_mode=reinforce the advantage IS the reward (no baseline, no scaling), and the dapo loss sums
# -ratio * A over every completion token of the batch: the 4 completions (>= 1 token each) of one group at
# 1e38..3e38 overflow float32 to -inf. The reward is huge only for the prompt "0+0=", so only the steps whose
# prompts include it fault (once per pass over the 36 prompts); the others train normally. The values alternate
# within the group so that it is never a zero-variance group (dynamic sampling would drop it). Independent of the
# sampled completions, hence of the model and the seed.

HUGE_REWARD = """
def huge(prompts, completions, **kwargs):
    return [(3e38 if i % 2 else 1e38) if p == "0+0=" else 0.0 for i, p in enumerate(prompts)]
"""
NONFINITE = tuple(
    "--advantage_mode reinforce --dynamic_sampling false --max_steps 12 --logging_steps 1".split()
)


@pytest.fixture
def huge_reward(tmp_path) -> str:
    path = tmp_path / "hugerew.py"
    path.write_text(HUGE_REWARD)
    return f"{path}:huge"


def test_nonfinite_loss_stops_with_one_line_naming_step_and_quantity(
    seed_reference, tmp_path, huge_reward, capfd
):
    out = tmp_path / "nan"
    rewards = ("--reward_funcs", "accuracy", huge_reward)
    rc = run_inproc(seed_reference, out, *rewards, *NONFINITE, "--save_steps", "1")
    assert rc == 1
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in "\n".join(err)
    line = errors[0]
    assert "loss" in line and "NaN or infinite" in line, line
    step = int(line.split("step ")[1].split(":")[0])
    assert 1 <= step <= 12
    assert last_step(out) == step - 1  # nothing of the faulty step was logged...
    if step > 1:
        assert latest_step(out) == step - 1  # ...and the last good step's checkpoint is intact
        assert_checkpoints_sound(out)


@pytest.mark.slow
def test_nonfinite_loss_with_skip_completes_and_counts_the_skips(seed_reference, tmp_path, huge_reward):
    out = tmp_path / "skip"
    assert (
        run_inproc(
            seed_reference,
            out,
            "--reward_funcs",
            "accuracy",
            huge_reward,
            *NONFINITE,
            "--on_nonfinite",
            "skip",
        )
        == 0
    )
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == list(range(1, 13))
    skipped = rows[-1]["nonfinite_skipped"]
    assert 0 < skipped < 12
    assert sum("loss" not in r for r in rows) >= skipped  # a skipped step logs no loss
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows if "loss" in r)
    final = load_file(str(out / "final" / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in final.values())  # a skipped step never touched the weights


# ================================================================================================ 5. bad input
# The table of bad inputs, by class, is tests/test_bad_input.py.


@pytest.mark.slow
def test_a_failed_launch_leaves_the_output_dir_reusable(seed_reference, tmp_path, capfd):
    out = tmp_path / "out"
    assert run_inproc(seed_reference, out, *"--max_steps 2 --resume_from_checkpoint latest".split()) == 1
    capfd.readouterr()
    rc = run_inproc(seed_reference, out, "--max_steps", "2")
    assert rc == 0, capfd.readouterr().err


# ================================================================================================ 6. safe loading


def test_no_pickle_loading_in_project_code():
    sources = [
        REPO / "train_grpo.py",
        *(REPO / "tinygrpo").rglob("*.py"),
        *(REPO / "tiny_lm").rglob("*.py"),
        *(REPO / "rewards").rglob("*.py"),
    ]
    offenders = []
    for path in sources:
        text = path.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if "weights_only=False" in code or "pickle.load" in code or "torch.load(" in code:
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert offenders == []


@pytest.mark.slow
def test_checkpoints_hold_safetensors_and_resume_never_unpickles(seed_reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    # (a constant schedule: resuming with more steps is the same run; a decaying one would be refused)
    constant = ("--lr_scheduler_type", "constant")
    assert (
        run_inproc(
            seed_reference, out, *"--max_steps 2 --save_steps 1 --dataset_test_split".split(), "", *constant
        )
        == 0
    )
    for p in [*ckpt.checkpoint_dirs(out), out / "final"]:
        names = {f.name for f in p.iterdir()}
        assert "model.safetensors" in names and not names & {"pytorch_model.bin", "model.bin"}, names

    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert (
        run_inproc(
            seed_reference,
            out,
            "--max_steps",
            "3",
            "--dataset_test_split",
            "",
            "--resume_from_checkpoint",
            str(out / "checkpoint-2"),
            *constant,
        )
        == 0
    )
    # accelerate loads the optimizer, scheduler and RNG states (torch pickles) with weights_only=True.
    assert calls and all(w is True for w in calls), calls


CONSTANT_REWARD = """
def const(completions, **kwargs):
    return [1.0] * len(completions)
"""


def test_dynamic_sampling_with_no_signal_at_all_does_not_crash(seed_reference, tmp_path, capfd):
    """A constant reward: every group has zero variance in every round (so does a model that is always right, as in a
    long seed-bank run). Regression test: this used to end in an IndexError on the empty batch."""
    path = tmp_path / "constrew.py"
    path.write_text(CONSTANT_REWARD)
    out = tmp_path / "out"
    rc = run_inproc(
        seed_reference,
        out,
        "--reward_funcs",
        f"{path}:const",
        *"--dynamic_sampling true --max_steps 2 --dataset_test_split".split(),
        "",
    )
    assert rc == 0 and last_step(out) == 2


# ================================================================================================ launchers and signals


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # (a zombie has ended)
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _wait_gone(pid: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"process {pid} did not end")
        time.sleep(0.01)


def launched(ref: str, out: Path, processes: int, *extra: str, tag: str = "run") -> subprocess.Popen:
    """train_grpo.py under `accelerate launch`: 1 process (its plain launcher), or 2 CPU processes (torchrun)."""
    launcher = [*LAUNCH, "--cpu", "--num_processes", "1"] if processes == 1 else TWO_CPU_PROCESSES
    logs = out.parent / f"{out.name}.{tag}"
    return subprocess.Popen(
        [*launcher, "train_grpo.py", *cli(ref, out, *extra)],
        cwd=REPO,
        env=LAUNCH_ENV,
        stdout=open(f"{logs}.out", "w"),
        stderr=open(f"{logs}.err", "w"),
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.kills
def test_sigterm_to_the_accelerate_launcher_reaches_the_run_which_saves_and_resumes_exactly(
    seed_reference, straight_run, tmp_path
):
    # accelerate's plain launcher dies of SIGTERM without passing it on; the run gets it from the kernel when its
    # parent dies (PR_SET_PDEATHSIG), stops at the next step boundary and saves.
    out = tmp_path / "l"
    proc = launched(seed_reference, out, 1, *LONG)
    wait_for(lambda: last_step(out) >= 4, proc, "step 4")
    (child,) = _children(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    _wait_gone(child)
    stopped = last_step(out)
    assert 4 <= stopped < N_STEPS and latest_step(out) == stopped
    assert_checkpoints_sound(out)
    assert run_inproc(seed_reference, out, *LONG, "--resume_from_checkpoint", "latest") == 0
    assert_same_run(out, straight_run)


TWO = ("--max_steps", "30", "--save_steps", "2", "--logging_steps", "1", "--eval_steps", "15")


@pytest.fixture(scope="module")
def straight_2proc(seed_reference, tmp_path_factory) -> Path:
    """The uninterrupted 2-process run that the interrupted 2-process runs must reproduce."""
    out = tmp_path_factory.mktemp("straight2") / "a"
    proc = launched(seed_reference, out, 2, *TWO, tag="straight")
    assert proc.wait(timeout=300) == 0, stderr_of(out, "straight")
    return out


@pytest.mark.kills
@pytest.mark.slow
def test_two_processes_stopped_by_sigterm_resume_exactly(seed_reference, straight_2proc, tmp_path):
    # SIGTERM to the (torchrun) launcher of 2 CPU processes: it passes SIGTERM to both, they agree on the step to
    # stop after, save one checkpoint together, and a resumed 2-process run ends as the uninterrupted one.
    steps, straight = TWO, straight_2proc
    out = tmp_path / "t"
    proc = launched(seed_reference, out, 2, *steps)
    wait_for(lambda: last_step(out) >= 3, proc, "step 3")
    workers = _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    for pid in workers:
        _wait_gone(pid)
    stopped = last_step(out)
    assert 3 <= stopped < 30 and latest_step(out) == stopped, stderr_of(out)
    proc = launched(seed_reference, out, 2, *steps, "--resume_from_checkpoint", "latest", tag="resumed")
    assert proc.wait(timeout=300) == 0, stderr_of(out, "resumed")
    assert_same_run(out, straight)


@pytest.mark.kills
@pytest.mark.slow
def test_two_processes_killed_at_a_random_moment_resume_exactly(seed_reference, straight_2proc, tmp_path):
    # SIGKILL to every process of a 2-process run at once (mid-step or mid-save): the newest complete checkpoint is
    # sound, and resuming from it ends as the uninterrupted run.
    steps, straight = TWO, straight_2proc
    out = tmp_path / "k"
    proc = launched(seed_reference, out, 2, *steps)
    wait_for(lambda: latest_step(out) >= 2, proc, "the first checkpoint")
    time.sleep(random.Random(7).uniform(0.0, 0.3))
    # torchrun starts its workers in process groups of their own: kill the launcher and every process under it
    pids = [proc.pid, *_descendants(proc.pid)]
    assert len(pids) >= 3  # the launcher (the agent) and the two training processes
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    for pid in pids[1:]:
        _wait_gone(pid)
    assert_checkpoints_sound(out)
    proc = launched(seed_reference, out, 2, *steps, "--resume_from_checkpoint", "latest", tag="resumed")
    assert proc.wait(timeout=300) == 0, stderr_of(out, "resumed")
    assert_same_run(out, straight)


@pytest.mark.slow
def test_latest_skips_a_damaged_checkpoint_says_so_and_resumes_exactly(
    seed_reference, straight_run, tmp_path, capsys
):
    out = tmp_path / "d"
    assert run_inproc(seed_reference, out, *LONG[:1], "6", *LONG[2:]) == 0  # checkpoints at steps 3 and 6
    weights = out / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")  # one byte changed: same size, another hash
    capsys.readouterr()
    assert (
        run_inproc(seed_reference, out, *LONG[:1], "6", *LONG[2:], "--resume_from_checkpoint", "latest") == 0
    )
    printed = capsys.readouterr().out
    assert (
        f"skipping {out / 'checkpoint-6'}: model.safetensors does not match its SHA-256 in the manifest"
        in printed
    )
    assert f"resumed from {out / 'checkpoint-3'} at step 3" in printed
    straight = tmp_path / "s"
    assert run_inproc(seed_reference, straight, *LONG[:1], "6", *LONG[2:]) == 0
    assert_same_run(out, straight)


def test_a_checkpoint_that_cannot_be_written_is_one_line_saying_what_was_kept(
    seed_reference, tmp_path, monkeypatch, capfd
):
    # The disk fills up at the second checkpoint: the run stops with one line naming the cause and the checkpoint
    # that is still complete; nothing half-written counts as a checkpoint.
    from accelerate import Accelerator

    out = tmp_path / "full"
    real_save, calls = Accelerator.save_state, []

    def save_state(self, path, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", f"{path}/optimizer.bin")
        return real_save(self, path, **kw)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    capfd.readouterr()
    assert (
        run_inproc(seed_reference, out, *"--max_steps 6 --save_steps 2 --dataset_test_split".split(), "") == 1
    )
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert err == [
        f"error: step 4: could not write the checkpoint: No space left on device "
        f"({out}/.tmp-checkpoint-4/optimizer.bin); the last complete checkpoint is {out / 'checkpoint-2'}"
    ]
    assert [p.name for p in ckpt.checkpoint_dirs(out)] == ["checkpoint-2"]
    assert ckpt.verify(out / "checkpoint-2") is None


@pytest.mark.parametrize("forecast, samples", [(0, 32), (256, 144)])
def test_a_run_whose_every_reward_is_none_stops(seed_reference, tmp_path, capfd, forecast, samples):
    """At the first samples the rewards see: step 1's 32, or the signal forecast's 36 prompts x 4 before it."""
    (tmp_path / "none.py").write_text("def none(completions, **kw):\n    return [None] * len(completions)\n")
    out = tmp_path / "run"
    capfd.readouterr()
    argv = ["--reward_funcs", f"{tmp_path / 'none.py'}:none", "--dataset_test_split", ""]
    rc = run_inproc(seed_reference, out, *argv, "--signal_forecast_prompts", str(forecast))
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and err == [
        f"error: no reward function applies to any of the {samples} samples (every reward is None): nothing to "
        "learn from; check the reward functions (none) and the dataset's columns"
    ]
    assert not (out / "final").exists()


@pytest.mark.slow
def test_two_processes_stop_together_when_the_main_one_cannot_write_a_checkpoint(seed_reference, tmp_path):
    # Only the main process writes the checkpoint's last files; when it fails there, the other process must stop
    # too (not wait for it at the next hand-off), and the one line comes from the process that failed.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import tinygrpo.run.checkpoint as ckpt\n"
        "real = ckpt.write_manifest\n"
        "def write_manifest(path):\n"
        "    if str(path).endswith('-4'):\n"
        "        raise OSError(28, 'No space left on device', str(path / 'MANIFEST'))\n"
        "    return real(path)\n"
        "ckpt.write_manifest = write_manifest\n"
    )
    out = tmp_path / "full"
    env = {**LAUNCH_ENV, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}
    argv = cli(seed_reference, out, *"--max_steps 6 --save_steps 2 --dataset_test_split".split(), "")
    proc = subprocess.run(
        [*TWO_CPU_PROCESSES, "train_grpo.py", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0
    assert "[rank1]" not in proc.stderr, proc.stderr  # no traceback of a process left waiting at a barrier
    assert errors == [
        f"error: step 4: could not write the checkpoint: No space left on device "
        f"({out}/.tmp-checkpoint-4/MANIFEST); the last complete checkpoint is {out / 'checkpoint-2'}"
    ], proc.stderr
    assert [p.name for p in ckpt.checkpoint_dirs(out)] == ["checkpoint-2"]
    assert not (out / "final").exists()


@pytest.mark.slow
def test_the_trainer_api_refuses_to_resume_a_run_trained_with_other_settings(seed_reference, tmp_path):
    # train_grpo.py checks the settings before it loads anything; a script that calls GRPOTrainer.train() with a
    # checkpoint gets the same check from the trainer itself.
    from tinygrpo.data.problems import load_split
    from tinygrpo.run.config import ConfigError, GRPOConfig
    from tinygrpo.run.launch import load_model_and_tokenizer
    from tinygrpo.run.trainer import GRPOTrainer

    out = tmp_path / "run"
    assert (
        run_inproc(seed_reference, out, *"--max_steps 2 --save_steps 2 --dataset_test_split".split(), "") == 0
    )
    saved = json.loads((out / "checkpoint-2" / ckpt.CONFIG_FILE).read_text())
    model, tok = load_model_and_tokenizer(seed_reference, "model_name_or_path")
    cfg = GRPOConfig(**{**saved, "learning_rate": saved["learning_rate"] * 2})
    trainer = GRPOTrainer(cfg, model, tok, load_split("seed_bank", "train"))
    with pytest.raises(
        ConfigError, match=r"was trained with other settings \(learning_rate 0.002 -> 0.004\)"
    ):
        trainer.train(out / "checkpoint-2")
    assert trainer.step == 0


def test_resume_from_checkpoint_true_is_the_latest_unless_a_checkpoint_is_named_so(tmp_path, monkeypatch):
    """TRL's resume_from_checkpoint=True (`--resume_from_checkpoint true` on a command line) resumes from the newest
    complete checkpoint, as 'latest' does; a checkpoint directory that is itself named `true` is that directory."""
    out = tmp_path / "run"
    for step in (2, 10, 5):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        (out / f"checkpoint-{step}" / ckpt.STATE_FILE).write_text("{}")
    (out / "checkpoint-12").mkdir()  # (no state file: not a complete checkpoint)
    for spec in ("true", "True", "latest"):
        assert ckpt.resolve_checkpoint(spec, out, say=pytest.fail) == out / "checkpoint-10"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "true").mkdir()
    (tmp_path / "true" / ckpt.STATE_FILE).write_text("{}")
    assert ckpt.resolve_checkpoint("true", out, say=pytest.fail) == Path("true")
