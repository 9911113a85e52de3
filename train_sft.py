"""Supervised training of the reference policy:  python train_sft.py [--task NAME] [--config recipe.yaml] [--flag value]
It trains tiny_lm's TinyLM only (sized by --n_layer, --n_embd, --n_head); GRPO trains any causal LM of your own.

With no arguments it trains the default experiment's deliberately imperfect reference into checkpoints/reference
(400 training problems, 1000 steps). `--task NAME` trains that task's reference with its recipe
(tinygrpo/data/tasks/NAME.py) into checkpoints/NAME; a `--config` recipe overrides the task's, and flags override both
(as in train_grpo.py, whose names these share where the concept is the same: per_device_train_batch_size,
lr_scheduler_type, torch_num_threads, logging_steps; TRL's dataset_name, dataset_train_split, dataset_test_split
are accepted too). `python train_sft.py --help` lists every option; the recipe and its reasons are in
tinygrpo/sft/train.py.
"""

from __future__ import annotations

import sys
from pathlib import Path


def task_of(argv: list[str]) -> str:
    """The --task of a command line (or ''), before anything else is parsed: its recipe sets the defaults."""
    for i, a in enumerate(argv):
        if a == "--task" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--task="):
            return a.removeprefix("--task=")
    return ""


def main(argv: list[str] | None = None) -> int:
    import datasets
    from transformers.utils import logging as hf_logging

    from tinygrpo.base.parser import parse_args
    from tinygrpo.run.config import check_task_flag
    from tinygrpo.sft.config import SFTConfig, task_recipe
    from tinygrpo.sft.train import stop_on_signals, train_reference
    from tinygrpo.update.policy_update import NonFiniteError

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()  # (no "Generating train split" bars around the script's own lines)
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = None
    try:
        check_task_flag(argv)
        task = task_of(argv)
        cfg = parse_args(
            SFTConfig, argv, __doc__.split("\n\n")[0], defaults=task_recipe(task) if task else None
        )
        with stop_on_signals(Path(cfg.output_dir)):
            train_reference(cfg)
    except (ValueError, NonFiniteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # (Ctrl-C, SIGTERM: said in one line, as train_grpo.py does)
        print(f"\n{e}" if str(e) else "\ninterrupted: nothing saved", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a read-only place: the file, the cause, and that nothing was saved
        from tinygrpo.base.files import describe_write_error

        where = cfg.output_dir if cfg is not None else "the output directory"
        print(f"error: {describe_write_error(e, f'no model was saved in {where}')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
