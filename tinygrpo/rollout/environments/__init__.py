"""The built-in environments, one file each (tinygrpo/rollout/environment.py): calculator.py (tools inside a
completion) and guess_number.py (an environment over turns)."""
