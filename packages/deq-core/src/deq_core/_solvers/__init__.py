"""Solver implementations, one per file, on the protocol of :mod:`.base`; :mod:`.resolve` turns a solver given as a
string (a built-in's shorthand or an import path) into an object."""

from .anderson import Anderson
from .base import Loop, Solver, Step
from .broyden import Broyden
from .fixed_point import FixedPoint
from .resolve import BUILTIN_SOLVERS, options_of, resolve_solver

__all__ = [
    "BUILTIN_SOLVERS",
    "Anderson",
    "Broyden",
    "FixedPoint",
    "Loop",
    "Solver",
    "Step",
    "options_of",
    "resolve_solver",
]
