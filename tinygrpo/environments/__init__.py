"""The built-in environments, one file each (tinygrpo/environment.py)."""
