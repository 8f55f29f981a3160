"""Solver implementations, one per file; each drives a :class:`~deq_core._solvers._run.SolveRun` and has a
``check_options`` that validates its keyword options without running."""

from . import anderson as _anderson
from . import broyden as _broyden
from . import fixed_point as _fixed_point

SOLVERS = {"fixed_point": _fixed_point.fixed_point, "anderson": _anderson.anderson, "broyden": _broyden.broyden}
OPTION_CHECKS = {
    "fixed_point": _fixed_point.check_options,
    "anderson": _anderson.check_options,
    "broyden": _broyden.check_options,
}

__all__ = ["OPTION_CHECKS", "SOLVERS"]
