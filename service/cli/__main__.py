"""`python -m service.cli`: the `toolscout` command without the console script (a checkout on PYTHONPATH)."""

import sys

from service.cli import main

sys.exit(main())
