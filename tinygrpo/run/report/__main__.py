"""python -m tinygrpo.run.report RUN_DIR"""

import sys

from tinygrpo.run.report import main

sys.exit(main())
