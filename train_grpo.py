"""Token-level GRPO on the tiny char GPT:  accelerate launch train_grpo.py [--config configs/x.yaml] [--flag value]

With no arguments it runs the default experiment: 2-digit addition from the imperfect SFT reference (trained
first, with a line saying so, if checkpoints/reference is missing), then prints held-out accuracy before and after.
`python train_grpo.py --help` lists every option.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from tinygrpo.run.config import ConfigError, parse_config

# A saved tokenizer's vocabulary: tokenizers' own file, or a slow tokenizer's (BPE, WordPiece, SentencePiece).
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model")


def _one_line(e: Exception) -> str:
    """A library's whole message on one line (its first line alone may stop mid-sentence)."""
    return " ".join(str(e).split()) or type(e).__name__


def load_model_and_tokenizer(path: str, what: str):
    import torch
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


def main(argv: list[str] | None = None) -> int:
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()  # no "Generating train split" bars before a one-line error
    # accelerate warns on every checkpoint that the tied lm_head is stored once (it is re-tied on load).
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    out = None
    locks: list[int] = []  # the output_dir lock (a file descriptor), held for the run
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_config(argv)
        out = Path(cfg.output_dir)
        from tinygrpo.data.problems import load_splits
        from tinygrpo.data.task import task_of_reference
        from tinygrpo.data.writes import write_atomic
        from tinygrpo.run import launch
        from tinygrpo.run.trainer import GRPOTrainer

        launch.stop_with_launcher()
        acc = launch.build_accelerator(cfg)
        if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and acc.distributed_type != "FSDP":
            # accelerate drops FSDP when it runs on CPU (cpu=True): say so rather than let the user believe it.
            acc.print(
                f"note: the accelerate config asks for FSDP, but on CPU accelerate runs {acc.num_processes} "
                f"process(es) as {acc.distributed_type.value} (plain data parallelism, every process holding the "
                "whole model): accelerate's FSDP needs GPUs"
            )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        asked = launch.launcher_processes() if "WORLD_SIZE" not in os.environ else world
        if world != acc.num_processes or asked != acc.num_processes:
            raise ConfigError(
                f"accelerate launch asked for {max(world, asked)} processes but started {acc.num_processes} (its "
                f"plain launcher starts one unless mpirun is installed); on CPU launch with `accelerate launch "
                f"--config_file configs/accelerate/cpu_2proc.yaml train_grpo.py`"
            )

        # The output directory and the resume point, checked before anything expensive; every process checks the
        # resume point (each prints nothing but the main one).
        def take_output_dir() -> None:
            launch.check_apart(out, launch.grpo_inputs(cfg, launch.recipe_path(argv)))
            launch.check_writable(out)
            locks.append(launch.lock_output_dir(out))
            launch.prepare_output_dir(cfg)

        launch.on_main_process(acc, take_output_dir)
        resume_from = launch.resume_point(cfg, acc.print)
        # The data, before any model is trained or loaded; a family's problems are written on first use, by the
        # main process (the others wait, and read them).
        from tinygrpo.data.task import task_of_dataset

        def write_data() -> None:
            try:
                if (named := task_of_dataset(cfg.dataset_name)) is not None:
                    named.ensure_data()
            except ValueError as e:
                raise ConfigError(str(e)) from None

        launch.on_main_process(acc, write_data)
        try:
            train, evald = load_splits(
                cfg.dataset_name, cfg.dataset_train_split, cfg.dataset_test_split or None
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        task = task_of_reference(cfg.model_name_or_path)
        if task is not None and not Path(cfg.model_name_or_path, "config.json").is_file():
            if acc.is_main_process:  # a task's reference, missing: trained first with its recipe
                print(
                    f"no reference at {cfg.model_name_or_path}: training it first "
                    f"(python train_sft.py --task {task.name})"
                )
                from tinygrpo.run.sft import SFTConfig, train_reference

                train_reference(SFTConfig.for_task(task.name))
            acc.wait_for_everyone()
        model, tokenizer = load_model_and_tokenizer(cfg.model_name_or_path, "model_name_or_path")
        ref_model = None
        if cfg.beta > 0:
            ref_path = cfg.ref_model_name_or_path or cfg.model_name_or_path
            ref_model, _ = load_model_and_tokenizer(ref_path, "ref_model_name_or_path")
        if evald is not None:  # which rule decides held-out accuracy, and why that one
            from tinygrpo.run.evaluation import Verifier

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
        summary = trainer.train(resume_from)  # (summary.json too, while the output directory is still locked)
    except ConfigError as e:
        if str(e):  # (empty on the other processes when the main one reported the problem)
            print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\n{e}" if str(e) else "\ninterrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a file removed under the run: say what and where, and what was kept
        from tinygrpo.data.writes import describe_write_error
        from tinygrpo.run.checkpoint import last_checkpoint

        kept = last_checkpoint(out) if out is not None else "no checkpoint was kept"
        print(f"error: {describe_write_error(e, kept)}", file=sys.stderr)
        return 1
    except Exception as e:
        from rewards import RewardError
        from tinygrpo.run.trainer import NonFiniteError, SaveError

        if isinstance(e, NonFiniteError | RewardError | SaveError):
            if str(e):  # (a SaveError is empty on the processes that did not fail: the one that did says why)
                print(f"error: {e}", file=sys.stderr)
            return 1
        raise
    finally:
        for fd in locks:
            os.close(fd)
    if acc.is_main_process:
        before = summary["eval_before"].get("eval/accuracy")
        after = summary["eval_after"].get("eval/accuracy")
        if after is not None:
            b = f"{before:.1%}" if before is not None else "n/a (resumed)"
            skipped = summary["nonfinite_skipped_steps"]
            print(
                f"held-out greedy accuracy: {b} -> {after:.1%}  ({summary['steps']} steps, "
                f"{summary['wall_seconds']:.0f}s, {summary['num_completions']:,} completions sampled"
                + (f", {skipped} steps skipped for a NaN or infinite loss" if skipped else "")
                + ")"
            )
        written = [
            f"{n}/" if (out / n).is_dir() else n for n in (*launch.RUN_FILES, "final") if (out / n).exists()
        ]
        print(f"outputs in {cfg.output_dir}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
