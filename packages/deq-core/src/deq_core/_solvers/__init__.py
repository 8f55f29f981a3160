"""Solver implementations, one per file; each drives a :class:`~deq_core._solvers._run.SolveRun`."""

from .anderson import anderson
from .broyden import broyden
from .fixed_point import fixed_point

SOLVERS = {"fixed_point": fixed_point, "anderson": anderson, "broyden": broyden}

__all__ = ["SOLVERS", "anderson", "broyden", "fixed_point"]
