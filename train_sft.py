"""Supervised training of the reference policy:  python train_sft.py [--flag value]

With no arguments it trains the default experiment's deliberately imperfect reference into checkpoints/reference
(400 training problems, 1000 steps; ~66 % held-out). `python train_sft.py --help` lists every option; the recipe
and its reasons are in tinygrpo/sft.py.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from transformers import HfArgumentParser
    from transformers.utils import logging as hf_logging

    from tinygrpo.sft import SFTConfig, train_reference
    from tinygrpo.update import NonFiniteError

    class Parser(HfArgumentParser):
        def error(self, message: str) -> None:
            raise ValueError(message)  # one `error:` line instead of argparse's usage and exit 2

    hf_logging.disable_progress_bar()
    try:
        (cfg,) = Parser(SFTConfig, allow_abbrev=False).parse_args_into_dataclasses(args=argv)
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
