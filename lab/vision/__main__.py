"""``python -m lab.vision {claims,commands,restore} --output-dir OUT ...``: see :mod:`lab.vision.reproduce`."""

from __future__ import annotations

import sys

from .reproduce import main

if __name__ == "__main__":
    sys.exit(main())
