"""What every layer uses, and nothing of tinygrpo's own. Imports nothing of tinygrpo's other packages.

options.py     an option's one declaration (help, bound, choices beside it), option groups, their checks
parser.py      the command line and YAML recipes of a config dataclass (TRL's TrlParser), TRL's options not taken
files.py       files written whole or not at all, save errors that name the file; the output directory's checks
processes.py   the processes a batch is spread over (accelerate): gather, reduce, agree
progress.py    a progress bar for work that takes more than a few seconds
"""
