"""The built-in tasks, one file each; every module here registers its task with `tinygrpo.data.task.register_task`.

addition.py, addition_long.py, multiplication.py, chain_sum.py, countdown.py, reverse.py, guess_number.py,
seed_bank.py, reasoning_gym.py (reasoning-gym's procedural datasets as tasks); _splits.py cuts disjoint splits,
_formats.py the answer formats tasks share.
"""
