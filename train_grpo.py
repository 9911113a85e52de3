"""Token-level GRPO on the tiny char GPT:  accelerate launch train_grpo.py [--config configs/x.yaml] [--flag value]

With no arguments it runs the default experiment: 2-digit addition from the imperfect SFT reference (trained
first, with a line saying so, if checkpoints/reference is missing), then prints held-out accuracy before and after.
`python train_grpo.py --help` lists every option.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

from tinygrpo.config import ConfigError, GRPOConfig, parse_config

DEFAULT_REFERENCE = GRPOConfig.__dataclass_fields__["model_name_or_path"].default
RUN_FILES = ("metrics.jsonl", "completions.jsonl", "plots.png", "summary.json", "config.json")
# What shows that a run happened (config.json alone is a failed start).
RUN_EVIDENCE = ("metrics.jsonl", "completions.jsonl", "summary.json", "final")


def prepare_output_dir(cfg: GRPOConfig) -> None:
    """Refuse to overwrite another run's output unless asked (or resuming)."""
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir {out} exists and is not a directory")
    previous = out.is_dir() and any((out / f).exists() for f in RUN_EVIDENCE)
    previous = previous or (out.is_dir() and any(out.glob("checkpoint-*")))
    if cfg.resume_from_checkpoint or not previous:
        return
    if not cfg.overwrite_output_dir:
        raise ConfigError(
            f"output_dir {out} already holds a run; pass --overwrite_output_dir to replace it, "
            f"--resume_from_checkpoint latest to continue it, or choose another --output_dir"
        )
    for f in RUN_FILES:
        (out / f).unlink(missing_ok=True)
    for d in [out / "final", *out.glob("checkpoint-*"), *out.glob(".tmp-checkpoint-*"), out / "runs"]:
        shutil.rmtree(d, ignore_errors=True)


def launcher_processes() -> int:
    """The number of processes asked of the `accelerate launch` that started this process: its --num_processes, else
    its config file's. accelerate's plain launcher (CPU without mpirun) starts ONE process whatever that number is,
    and says nothing. Read from the launcher's command line (Linux); 1 when it cannot be told."""
    import os

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


def load_model_and_tokenizer(path: str, what: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401  (registers the model type with the Auto classes)

    p = Path(path)
    if not (p / "config.json").is_file():
        raise ConfigError(f"{what}={path}: no model there (missing config.json)")
    try:
        model, info = AutoModelForCausalLM.from_pretrained(p, use_safetensors=True, output_loading_info=True)
        tokenizer = AutoTokenizer.from_pretrained(p)
    except Exception as e:  # noqa: BLE001  (any load failure is the user's checkpoint; say which and why)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{what}={path}: cannot load the model: {msg}") from None
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
    try:
        cfg = parse_config(argv)
        import os

        import torch
        from accelerate import Accelerator

        from tinygrpo.problems import load_split
        from tinygrpo.trainer import GRPOTrainer

        acc = Accelerator(
            cpu=not torch.cuda.is_available(),
            log_with="tensorboard" if cfg.report_to == "tensorboard" else None,
            project_dir=cfg.output_dir,
        )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        asked = launcher_processes() if "WORLD_SIZE" not in os.environ else world
        if world != acc.num_processes or asked != acc.num_processes:
            raise ConfigError(
                f"accelerate launch asked for {max(world, asked)} processes but started {acc.num_processes} (its "
                f"plain launcher starts one unless mpirun is installed); on CPU launch with `accelerate launch "
                f"--config_file configs/accelerate/cpu_2proc.yaml train_grpo.py`"
            )
        if acc.is_main_process:
            prepare_output_dir(cfg)
        acc.wait_for_everyone()
        if (
            cfg.model_name_or_path == DEFAULT_REFERENCE
            and not Path(DEFAULT_REFERENCE, "config.json").is_file()
        ):
            if acc.is_main_process:
                print(f"no reference at {DEFAULT_REFERENCE}: training it first (python train_sft.py)")
                from tinygrpo.sft import SFTConfig, train_reference

                train_reference(SFTConfig(output_dir=DEFAULT_REFERENCE))
            acc.wait_for_everyone()
        model, tokenizer = load_model_and_tokenizer(cfg.model_name_or_path, "model_name_or_path")
        ref_model = None
        if cfg.beta > 0:
            ref_path = cfg.ref_model_name_or_path or cfg.model_name_or_path
            ref_model, _ = load_model_and_tokenizer(ref_path, "ref_model_name_or_path")
        try:
            train = load_split(cfg.dataset, cfg.train_split)
            evald = load_split(cfg.dataset, cfg.eval_split) if cfg.eval_split else None
        except ValueError as e:
            raise ConfigError(str(e)) from None
        trainer = GRPOTrainer(cfg, model, tokenizer, train, evald, ref_model=ref_model, accelerator=acc)
        if acc.is_main_process:
            Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(cfg.output_dir) / "config.json").write_text(json.dumps(cfg.__dict__, indent=2))
        summary = trainer.train()
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\n{e}" if str(e) else "\ninterrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from rewards import RewardError
        from tinygrpo.trainer import NonFiniteError

        if isinstance(e, NonFiniteError | RewardError):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise
    if acc.is_main_process:
        (Path(cfg.output_dir) / "summary.json").write_text(json.dumps(summary, indent=2))
        before = summary["eval_before"].get("eval/accuracy")
        after = summary["eval_after"].get("eval/accuracy")
        if after is not None:
            b = f"{before:.1%}" if before is not None else "n/a (resumed)"
            print(
                f"held-out greedy accuracy: {b} -> {after:.1%}  ({summary['steps']} steps, "
                f"{summary['wall_seconds']:.0f}s, {summary['num_completions']:,} completions sampled)"
            )
        out = Path(cfg.output_dir)
        written = [f"{n}/" if (out / n).is_dir() else n for n in (*RUN_FILES, "final") if (out / n).exists()]
        print(f"outputs in {cfg.output_dir}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
