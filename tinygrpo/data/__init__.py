"""Problem sets and tasks: what the model is trained and judged on.

Owns the problem files on disk (problems.py: load, check, build whole), the task registry (task.py) and the tasks
themselves (tasks/: one file each, a generator of splits, its verifier's name and its recipes), and the two file
helpers every stage writes with (writes.py: whole or not at all; progress.py). Imports nothing of tinygrpo's other
packages.
"""
