"""python -m tinygrpo.studies.estimators"""

import sys

from .cli import main

sys.exit(main())
