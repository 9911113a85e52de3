"""Problem sets and tasks: what the model is trained and judged on. Imports tinygrpo.base at most.

problems.py    the problem files on disk: load, check, build whole
task.py        the task registry: a task's generator of splits, its alphabet, its verifier's name, its recipes
tasks/         the built-in tasks, one file each
verifier.py    the rule that decides whether a completion is right (a task's verifier), and answer formats
checks.py      the start-up checks that a split, its verifier and the rewards agree (both entry points run them)
"""
