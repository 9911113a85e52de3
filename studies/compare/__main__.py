"""python -m studies.compare"""

from .cli import main

main()
