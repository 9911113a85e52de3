"""What a launch checks and sets up before any expensive work: the output directory (apart from every input, writable,
held by this run alone, not another run's unless asked), the launcher, and the checkpoint a resume starts from and its
settings.

Every check fails with a ConfigError naming the problem; train_grpo.py prints it as one `error:` line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
from dataclasses import asdict, fields
from pathlib import Path
from typing import NamedTuple

from tqdm.auto import tqdm

from tinygrpo.data.writes import writing
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run.config import ConfigError, GRPOConfig

RUN_FILES = (
    "metrics.jsonl",
    "completions.jsonl",
    "warnings.jsonl",
    "prompt_stats.jsonl",
    "eval_failures.jsonl",
    "beliefs.jsonl",
    "plots.png",
    "report.html",
    "summary.json",
    "config.json",
)
# What shows that a run happened (config.json alone is a failed start).
RUN_EVIDENCE = ("metrics.jsonl", "completions.jsonl", "summary.json", "final")
LOCK_FILE = ".lock"

# Settings a resumed run may change: they decide what is logged, saved or shown, not what is trained. (max_steps
# too, when the learning-rate schedule does not depend on it; threads change float rounding, not the run.)
RESUMABLE_CHANGES = frozenset(
    {
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "output_dir",
        "dataset_test_split",
        "logging_steps",
        "eval_steps",
        "eval_pass_k",
        "save_steps",
        "save_total_limit",
        "num_completions_to_print",
        "log_completions",
        "report_to",
        "run_name",
        "metric_for_best_model",  # (callbacks' state starts afresh on resume)
        "greater_is_better",
        "disable_tqdm",
        "make_plots",
        "torch_num_threads",
        "signal_forecast_prompts",  # (sampled before the first step, from generators of its own)
        "signal_forecast_min",
    }
)


def recipe_path(argv: list[str]) -> str | None:
    """The --config file of a command line (as config.parse_config finds it), or None."""
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            return a.removeprefix("--config=")
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


class Input(NamedTuple):
    """A file or directory a run reads: its field, its value as given, the path read, and whether the input owns
    its directory (a model, a dataset) or is one file in a directory that holds others (a recipe.yaml beside runs/,
    the README's `--reward_funcs my_rewards.py:brevity` in the working directory)."""

    field: str
    value: str
    path: Path
    owns_dir: bool


def grpo_inputs(cfg: GRPOConfig, recipe: str | None) -> list[Input]:
    """What a GRPO run reads from disk."""
    from rewards.registry import reward_file
    from tinygrpo.data.problems import dataset_dir

    found = [Input("model_name_or_path", cfg.model_name_or_path, Path(cfg.model_name_or_path), True)]
    if cfg.beta > 0 and cfg.ref_model_name_or_path:  # (with beta == 0 no reference is read)
        found.append(
            Input(
                "ref_model_name_or_path", cfg.ref_model_name_or_path, Path(cfg.ref_model_name_or_path), True
            )
        )
    found.append(Input("dataset", cfg.dataset_name, dataset_dir(cfg.dataset_name), True))
    found += [
        Input("reward_funcs", str(f), f, False) for spec in cfg.reward_funcs if (f := reward_file(spec))
    ]
    if recipe:
        found.append(Input("--config", recipe, Path(recipe), False))
    return found


def check_apart(out: str | Path, inputs: list[Input]) -> None:
    """A run never writes where it reads. Refused, by real paths (symlinks, relative paths, trailing slashes
    resolved): output_dir equal to an input's directory, or inside a directory the input owns (a model, a dataset),
    and any input inside output_dir. The last also covers `--model_name_or_path runs/x/final --output_dir runs/x`:
    output_dir is the run's to replace (final/ at the end, checkpoints pruned, and all of it cleared by
    --overwrite_output_dir before the model is even loaded), so an input there could be deleted under the run."""
    # (realpath, not resolve(): a symlink loop is left as it is, for check_writable to report, not an error here)
    o = Path(os.path.realpath(out))
    for field, value, path, owns_dir in inputs:
        p = Path(os.path.realpath(path))
        where = p if owns_dir else p.parent
        if o == where:
            problem = f"output_dir {out} is {'' if owns_dir else 'the directory of '}{field} {value}"
        elif owns_dir and where in o.parents:
            problem = f"output_dir {out} is inside {field} {value}"
        elif o in p.parents:
            problem = f"{field} {value} is inside output_dir {out}"
        else:
            continue
        if str(o) != str(out) or str(p) != value:  # (say why two different spellings are the same place)
            problem += f" (both are {o})" if o == where else f" (real paths: {o} and {p})"
        raise ConfigError(f"{problem}: a run never writes where it reads; choose another --output_dir")


def check_writable(out: Path) -> None:
    """Create the output directory if needed and write a file in it, so that a read-only or missing place fails
    now, not after the models are loaded."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir {out} exists and is not a directory")
    probe = out / ".write-test"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        with contextlib.suppress(OSError):  # (a probe created, then not written)
            probe.unlink(missing_ok=True)
        raise ConfigError(f"output_dir {out} is not writable: {e.strerror or e}") from None


def lock_output_dir(out: Path) -> int:
    """Hold output_dir for this run (an exclusive lock on its .lock file, released when the process ends, even by
    SIGKILL); a second run into the same directory is refused, naming the holder's pid. Returns the lock's fd,
    which must stay open for the run."""
    import fcntl

    with writing(out / LOCK_FILE):
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(
            f"output_dir {out} is in use by another run (pid {holder}); wait for it to finish or choose another "
            f"--output_dir"
        ) from None
    try:
        with writing(out / LOCK_FILE):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        os.close(fd)
        raise
    return fd


def prepare_output_dir(cfg: GRPOConfig) -> None:
    """Refuse to overwrite another run's output unless asked (or resuming); when asked, clear it."""
    out = Path(cfg.output_dir)
    previous = any((out / f).exists() for f in RUN_EVIDENCE) or any(out.glob("checkpoint-*"))
    if cfg.resume_from_checkpoint or not previous:
        return
    if not cfg.overwrite_output_dir:
        raise ConfigError(
            f"output_dir {out} already holds a run; pass --overwrite_output_dir to replace it, "
            f"--resume_from_checkpoint latest to continue it, or choose another --output_dir"
        )
    for f in RUN_FILES:
        with writing(out / f):
            (out / f).unlink(missing_ok=True)
    for d in [out / "final", *out.glob("checkpoint-*"), *out.glob(".tmp-checkpoint-*"), out / "runs"]:
        shutil.rmtree(d, ignore_errors=True)


def resume_point(cfg: GRPOConfig, say=print) -> Path | None:
    """The checkpoint to resume from (verified against its manifest; `latest` skips, and says so, any that does
    not verify), after checking that this launch's settings would continue the same run."""
    if not cfg.resume_from_checkpoint:
        return None
    path = ckpt.resolve_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir, say)
    saved = path / ckpt.CONFIG_FILE
    if saved.is_file():
        try:
            before = json.loads(saved.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"resume_from_checkpoint: cannot read {saved}: {e}") from None
        check_same_run(before, cfg, path)
    return path


def check_same_run(before: dict, cfg: GRPOConfig, path: Path) -> None:
    now = asdict(cfg)
    allowed = set(RESUMABLE_CHANGES)
    if now["max_steps"] is None:  # (num_train_epochs, compared itself, gives it from the same split)
        allowed.add("max_steps")
    if before.get("lr_scheduler_type") == cfg.lr_scheduler_type == "constant":
        allowed |= {"max_steps", "max_generations"}  # (a decaying schedule is a function of max_steps)
    changed = [
        f"{f.name} {before[f.name]!r} -> {now[f.name]!r}"
        for f in fields(GRPOConfig)
        if f.name in before and f.name not in allowed and before[f.name] != now[f.name]
    ]
    if changed:
        raise ConfigError(
            f"resume_from_checkpoint: {path} was trained with other settings ({'; '.join(changed)}); resume with "
            f"the same values, or start a new run in another --output_dir"
        )


def on_main_process(acc, fn) -> None:
    """Run `fn` on the main process only; if it raises a ConfigError there, the other processes raise an empty one
    (the main process reports it) instead of waiting for the main one forever."""
    import torch

    error = None
    if acc.is_main_process:
        try:
            fn()
        except ConfigError as e:
            error = e
    failed = torch.tensor(float(error is not None))
    if acc.num_processes > 1:
        failed = acc.reduce(failed, "max")
    if error is not None:
        raise error
    if failed.item() > 0:
        raise ConfigError("")


def launcher_processes() -> int:
    """The number of processes asked of the `accelerate launch` that started this process: its --num_processes,
    else its config file's. accelerate's plain launcher (CPU without mpirun) starts ONE process whatever that
    number is, and says nothing. Read from the launcher's command line (Linux); 1 when it cannot be told."""
    try:
        argv = [a.decode() for a in Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0") if a]
        # `accelerate launch ...`, `accelerate-launch ...` or `python -m accelerate.commands.launch ...`
        start = next(
            i + 1
            for i, a in enumerate(argv[:4])
            if (a == "launch" and "accelerate" in " ".join(argv[:i]))
            or a.endswith(("accelerate.commands.launch", "accelerate-launch"))
        )
        from accelerate.commands.config.config_args import default_config_file, load_config_from_file
        from accelerate.commands.launch import launch_command_parser

        args = launch_command_parser().parse_args(argv[start:])
        if args.num_processes is not None:
            return int(args.num_processes)
        path = args.config_file or default_config_file
        return int(load_config_from_file(path).num_processes or 1) if Path(path).is_file() else 1
    except (OSError, ValueError, StopIteration, SystemExit, AttributeError, UnicodeDecodeError):
        return 1


def stop_with_launcher() -> None:
    """Under `accelerate launch`, ask the kernel for a SIGTERM when the launcher dies (Linux): its plain launcher
    does not pass SIGTERM on, and the training process would run on as an orphan. SIGTERM stops at the next step
    boundary with a checkpoint, as Ctrl-C does."""
    if not any(k.startswith("ACCELERATE_") for k in os.environ):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return


def build_accelerator(cfg: GRPOConfig):
    """The run's Accelerator (the one place that builds it): the CPU unless a GPU is there; the trackers report_to
    names."""
    import torch
    from accelerate import Accelerator

    from tinygrpo.run.callbacks import report_trackers

    return Accelerator(
        cpu=not torch.cuda.is_available(),
        log_with=report_trackers(cfg.report_to) or None,
        project_dir=cfg.output_dir,
    )


class StopOnSignal:
    """Ctrl-C (SIGINT) or SIGTERM (what Docker, Kubernetes and Slurm send) asks for a stop at the next step
    boundary, where a checkpoint is exact; a second Ctrl-C stops at once. A SIGTERM after the first signal is taken
    as the same request (a launcher that dies on Ctrl-C sends one: see launch.stop_with_launcher). Installed only in
    the main thread (signal handlers can be set nowhere else)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.requested = False
        self.last_step_done = False  # (set by the loop once no step is left: a signal then stops nothing)
        self.name = "interrupted"
        self._previous: dict = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
            return
        self.requested = True
        self.name = signal.Signals(signum).name
        if self.verbose and self.last_step_done:
            tqdm.write(f"{self.name}: the last step is done: finishing the end-of-run writes first")
        elif self.verbose:
            tqdm.write(f"{self.name}: stopping after this step and saving a checkpoint (again to abort)")
