"""Token-level GRPO on the tiny char GPT:  accelerate launch train_grpo.py [--config configs/x.yaml] [--flag value]

With no arguments it runs the default experiment: 2-digit addition from the imperfect SFT reference (trained
first, with a line saying so, if checkpoints/reference is missing), then prints held-out accuracy before and after.
`python train_grpo.py --help` lists every option. The launch itself is tinygrpo/run/launch.py.
"""

from __future__ import annotations

import sys

from tinygrpo.run.launch import main

if __name__ == "__main__":
    sys.exit(main())
