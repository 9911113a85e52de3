"""tinygrpo: token-level GRPO on a tiny character transformer, checked against exact tabular oracles.

Kept import-free on purpose: `import tinygrpo` must stay cheap; import `tinygrpo.core`, `tinygrpo.bandit`, ...
directly.
"""

__version__ = "0.1.0"
