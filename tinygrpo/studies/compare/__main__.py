"""python -m tinygrpo.studies.compare"""

from .cli import main

main()
