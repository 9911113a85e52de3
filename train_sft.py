"""Supervised training of the reference policy:  python train_sft.py [--task NAME] [--flag value]

With no arguments it trains the default experiment's deliberately imperfect reference into checkpoints/reference
(400 training problems, 1000 steps; ~66 % held-out). `--task NAME` trains that task's reference with its recipe
(tinygrpo/tasks/NAME.py) into checkpoints/NAME; flags override the recipe. `python train_sft.py --help` lists every
option; the recipe and its reasons are in tinygrpo/sft.py.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    import datasets
    from transformers import HfArgumentParser
    from transformers.utils import logging as hf_logging

    from tinygrpo.sft import SFTConfig, task_recipe, train_reference
    from tinygrpo.update import NonFiniteError

    class Parser(HfArgumentParser):
        def error(self, message: str) -> None:
            raise ValueError(message)  # one `error:` line instead of argparse's usage and exit 2

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()  # (no "Generating train split" bars around the script's own lines)
    try:
        parser = Parser(SFTConfig, allow_abbrev=False)
        known, _ = parser.parse_known_args(args=argv)
        if (
            known.task
        ):  # the task's recipe sets the defaults; flags given override them (as a YAML recipe does)
            parser.set_defaults(**task_recipe(known.task))
        (cfg,) = parser.parse_args_into_dataclasses(args=argv)
        train_reference(cfg)
    except (ValueError, NonFiniteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a full disk, a read-only place: the file, the cause, and that nothing was saved
        from tinygrpo.writes import describe_write_error

        print(f"error: {describe_write_error(e, f'no model was saved in {cfg.output_dir}')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
