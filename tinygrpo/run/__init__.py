"""A run: its options (config.py with options_rollout.py, options_update.py; recipe.py parses them, checks.py checks
each field), the trainer's step and loop (trainer.py), the start-up checks (validation.py, launch.py), held-out
evaluation (evaluation.py), metrics and logs (metrics.py, metrics_io.py, run_logs.py, watch.py), checkpoints
(checkpoint.py, state.py), the end of a run (run_end.py) and its report (report/), and the SFT of a reference
(sft.py). May import every other package of tinygrpo; none imports it.
"""
