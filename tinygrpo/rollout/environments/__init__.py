"""The built-in environments, one file each (tinygrpo/rollout/environment.py)."""
