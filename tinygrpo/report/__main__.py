"""python -m tinygrpo.report RUN_DIR"""

import sys

from . import main

sys.exit(main())
