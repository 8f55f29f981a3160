"""The one exception type the command-line tools turn into a short message instead of a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: an unknown config name, a bad override, a malformed data file, a bad path.

    The message says what is wrong and how to fix it; ``python -m deq_toy.train`` prints it and exits with status 2.
    """
