"""A GRPO launch, `main` (train_grpo.py's): the options, then what it checks and sets up before any expensive work
(the launcher's processes; the output directory, apart from every input, writable, held by this run alone, not
another run's unless asked; the checkpoint a resume starts from and its settings; the data; the reference, trained
first when a task's is missing; the models), then the trainer's run, and the line that says how it went.

Every check fails with a ConfigError naming the problem, printed as one `error:` line (exit code 1).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

from rewards import RewardError
from rewards.registry import reward_file
from tinygrpo.base.files import (
    Input,
    check_apart,
    check_writable,
    describe_write_error,
    lock_output_dir,
    write_atomic,
    writing,
)
from tinygrpo.data.problems import dataset_dir, load_splits
from tinygrpo.data.task import task_of_dataset, task_of_reference
from tinygrpo.data.verifier import Verifier
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run.checkpoint import SaveError
from tinygrpo.run.config import ConfigError, GRPOConfig, parse_config
from tinygrpo.run.signals import stop_with_launcher
from tinygrpo.run.trainer import GRPOTrainer, build_accelerator
from tinygrpo.sft.config import SFTConfig
from tinygrpo.sft.train import train_reference
from tinygrpo.update.policy_update import NonFiniteError

# A saved tokenizer's vocabulary: tokenizers' own file, or a slow tokenizer's (BPE, WordPiece, SentencePiece).
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model")

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


def recipe_path(argv: list[str]) -> str | None:
    """The --config file of a command line (as config.parse_config finds it), or None."""
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            return a.removeprefix("--config=")
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def grpo_inputs(cfg: GRPOConfig, recipe: str | None) -> list[Input]:
    """What a GRPO run reads from disk."""
    found = [Input("model_name_or_path", cfg.model_name_or_path, Path(cfg.model_name_or_path), True)]
    if cfg.needs_reference and cfg.ref_model_name_or_path:  # (with beta == 0 no reference is read)
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


def on_main_process(acc, fn) -> None:
    """Run `fn` on the main process only; if it raises a ConfigError there, the other processes raise an empty one
    (the main process reports it) instead of waiting for the main one forever."""
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


def main(argv: list[str] | None = None) -> int:
    """train_grpo.py: a GRPO run from its command line; its exit code (0, 1 for a bad input or a failed run, 130
    when interrupted). Bad input is one `error:` line, before any expensive work."""
    quiet_libraries()
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg, locks = None, []  # (the output_dir lock, a file descriptor, held for the run)
    try:
        cfg = parse_config(argv)
        summary, is_main = run(cfg, argv, locks)
    except ConfigError as e:
        if str(e):  # (empty on the other processes when the main one reported the problem)
            print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\n{e}" if str(e) else "\ninterrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a file removed under the run: say what and where, and what was kept
        kept = ckpt.last_checkpoint(cfg.output_dir) if cfg is not None else "no checkpoint was kept"
        print(f"error: {describe_write_error(e, kept)}", file=sys.stderr)
        return 1
    except (NonFiniteError, RewardError, SaveError) as e:
        if str(e):  # (a SaveError is empty on the processes that did not fail: the one that did says why)
            print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        for fd in locks:
            os.close(fd)
    if is_main:
        say_outcome(summary, Path(cfg.output_dir))
    return 0


def quiet_libraries() -> None:
    """No library progress bar or warning between the run's own lines (a one-line error stays one line)."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()  # no "Generating train split" bars before a one-line error
    # accelerate warns on every checkpoint that the tied lm_head is stored once (it is re-tied on load).
    logging.getLogger("accelerate").setLevel(logging.ERROR)


def run(cfg: GRPOConfig, argv: list[str], locks: list[int]) -> tuple[dict, bool]:
    """The checks and set-up, in order (the cheap ones first), then the trainer's run: its summary, and whether this
    is the main process."""
    stop_with_launcher()
    acc = build_accelerator(cfg.output_dir, cfg.report_to)
    check_processes(acc)
    out = Path(cfg.output_dir)

    # The output directory and the resume point, checked before anything expensive; every process checks the resume
    # point (each prints nothing but the main one).
    def take_output_dir() -> None:
        check_apart(out, grpo_inputs(cfg, recipe_path(argv)))
        check_writable(out)
        locks.append(lock_output_dir(out))
        prepare_output_dir(cfg)

    on_main_process(acc, take_output_dir)
    resume_from = ckpt.resume_point(cfg, acc.print)
    train, evald = load_data(cfg, acc)
    ensure_reference(cfg, acc)
    model, tokenizer = load_model_and_tokenizer(cfg.model_name_or_path, "model_name_or_path")
    ref_model = None
    if cfg.needs_reference:
        ref_path = cfg.ref_model_name_or_path or cfg.model_name_or_path
        ref_model, _ = load_model_and_tokenizer(ref_path, "ref_model_name_or_path")
    if evald is not None:  # which rule decides held-out accuracy, and why that one
        try:
            verifier, why = Verifier.choose(cfg.dataset_name, cfg.eval_reward, cfg.task)
        except ValueError as e:
            raise ConfigError(f"eval_reward={cfg.eval_reward}: {e}") from None
        acc.print(
            f"held-out accuracy: {cfg.dataset_test_split} split, decided by the reward {verifier.name!r} ({why})"
        )
    trainer = GRPOTrainer(cfg, model, tokenizer, train, evald, ref_model=ref_model, accelerator=acc)
    if acc.is_main_process:
        write_atomic(out / "config.json", json.dumps(cfg.__dict__, indent=2))
    return trainer.train(resume_from), acc.is_main_process  # (summary.json too, while output_dir is locked)


def check_processes(acc) -> None:
    """The launcher started as many processes as it was asked for (its plain launcher starts one on a CPU, and
    says nothing); FSDP on a CPU is said to be plain data parallelism."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and acc.distributed_type != "FSDP":
        # accelerate drops FSDP when it runs on CPU (cpu=True): say so rather than let the user believe it.
        acc.print(
            f"note: the accelerate config asks for FSDP, but on CPU accelerate runs {acc.num_processes} "
            f"process(es) as {acc.distributed_type.value} (plain data parallelism, every process holding the "
            "whole model): accelerate's FSDP needs GPUs"
        )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    asked = launcher_processes() if "WORLD_SIZE" not in os.environ else world
    if world != acc.num_processes or asked != acc.num_processes:
        raise ConfigError(
            f"accelerate launch asked for {max(world, asked)} processes but started {acc.num_processes} (its "
            f"plain launcher starts one unless mpirun is installed); on CPU launch with `accelerate launch "
            f"--config_file configs/accelerate/cpu_2proc.yaml train_grpo.py`"
        )


def load_data(cfg: GRPOConfig, acc):
    """The training and held-out splits, before any model is trained or loaded; a family's problems are written on
    first use, by the main process (the others wait, and read them)."""

    def write_data() -> None:
        try:
            if (named := task_of_dataset(cfg.dataset_name)) is not None:
                named.ensure_data()
        except ValueError as e:
            raise ConfigError(str(e)) from None

    on_main_process(acc, write_data)
    try:
        return load_splits(cfg.dataset_name, cfg.dataset_train_split, cfg.dataset_test_split or None)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def ensure_reference(cfg: GRPOConfig, acc) -> None:
    """A task's reference that is missing is trained first, with its recipe (main process; the others wait)."""
    task = task_of_reference(cfg.model_name_or_path)
    if task is not None and not Path(cfg.model_name_or_path, "config.json").is_file():
        if acc.is_main_process:
            print(
                f"no reference at {cfg.model_name_or_path}: training it first (python train_sft.py --task {task.name})"
            )
            train_reference(SFTConfig.for_task(task.name))
        acc.wait_for_everyone()


def say_outcome(summary: dict, out: Path) -> None:
    """The run's last lines: held-out accuracy before and after, and what it wrote."""
    before, after = (summary[k].get("eval/accuracy") for k in ("eval_before", "eval_after"))
    if after is not None:
        b = f"{before:.1%}" if before is not None else "n/a (resumed)"
        skipped = summary["nonfinite_skipped_steps"]
        print(
            f"held-out greedy accuracy: {b} -> {after:.1%}  ({summary['steps']} steps, "
            f"{summary['wall_seconds']:.0f}s, {summary['num_completions']:,} completions sampled"
            + (f", {skipped} steps skipped for a NaN or infinite loss" if skipped else "")
            + ")"
        )
    written = [f"{n}/" if (out / n).is_dir() else n for n in (*RUN_FILES, "final") if (out / n).exists()]
    print(f"outputs in {out}: {', '.join(written)}")


def _one_line(e: Exception) -> str:
    """A library's whole message on one line (its first line alone may stop mid-sentence)."""
    return " ".join(str(e).split()) or type(e).__name__


def load_model_and_tokenizer(path: str, what: str):
    """A model and its tokenizer from a save_pretrained directory, refused in one line naming `what` (the option)
    when either is missing or does not load, the weights do not match the architecture, a weight is not finite, or
    the tokenizer has no pad or eos token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401  (registers the model type with the Auto classes)

    p = Path(path)
    if not (p / "config.json").is_file():
        raise ConfigError(f"{what}={path}: no model there (missing config.json)")
    # No vocabulary file: say so, rather than transformers' guess at what might have converted one.
    if not any((p / f).is_file() for f in VOCABULARY_FILES):
        raise ConfigError(
            f"{what}={path}: no tokenizer there (missing tokenizer.json, the tokenizer's vocabulary); save the "
            "tokenizer beside the model (tokenizer.save_pretrained)"
        )
    try:
        model, info = AutoModelForCausalLM.from_pretrained(p, use_safetensors=True, output_loading_info=True)
    except Exception as e:  # noqa: BLE001  (any load failure is the user's checkpoint; say which and why)
        raise ConfigError(f"{what}={path}: cannot load the model: {_one_line(e)}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(p)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{what}={path}: cannot load the tokenizer: {_one_line(e)}") from None
    # transformers initialises absent weights silently: a checkpoint that does not match the model is an error.
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(kind, []))
        if keys:
            raise ConfigError(
                f"{what}={path}: the weights do not match the {type(model).__name__} architecture "
                f"({len(keys)} {kind.replace('_', ' ')}, e.g. {keys[0]})"
            )
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise ConfigError(f"{what}={path}: weight {name} holds NaN or infinite values")
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise ConfigError(f"{what}={path}: the tokenizer needs a pad and an eos token")
    return model, tokenizer
