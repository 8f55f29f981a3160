"""``python -m lab.lm claims | commands | plan | restore ...``: :func:`lab.lm.reproduce.main`."""

import sys

from .reproduce import main

sys.exit(main())
