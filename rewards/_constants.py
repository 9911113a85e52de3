"""Constants shared by the reward modules (kept separate to avoid import cycles)."""

from __future__ import annotations

# How the trainer renders the end-of-sequence token inside decoded completions.
EOS = "<eos>"
