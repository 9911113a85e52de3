"""python -m tinygrpo.run.report RUN_DIR"""

import sys

from . import main

sys.exit(main())
