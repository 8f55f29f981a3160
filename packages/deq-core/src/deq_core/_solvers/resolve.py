"""A solver given by name: a built-in's shorthand (a key of :data:`BUILTIN_SOLVERS`) or an import path
"package.module:Class" of a user's :class:`~deq_core.Solver` (imported with importlib; there is no registry)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .anderson import Anderson
from .base import Solver
from .broyden import Broyden
from .fixed_point import FixedPoint

BUILTIN_SOLVERS: Mapping[str, type[Solver]] = MappingProxyType(
    {str(cls.name): cls for cls in (FixedPoint, Anderson, Broyden)}
)
"""The built-in solvers by shorthand (each class's ``name``), read-only: the one list of the names a solver given as a
string may take besides an import path (:func:`resolve_solver`, the ``deq.solver`` settings of a training config)."""

SolverLike = Solver | str | type[Solver]


def import_path_module(solver: object) -> str | None:
    """The module that resolving ``solver`` would import: ``"pkg.module"`` for the import path
    ``"pkg.module:Class"``; None for anything that imports nothing (a built-in's shorthand, a Solver class or object,
    an unknown name without ``:``, a value that is not a string)."""
    if not isinstance(solver, str) or solver in BUILTIN_SOLVERS or ":" not in solver:
        return None
    return solver.partition(":")[0]


def _imported(path: str) -> Any:
    """The object at ``"package.module:Name"``."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"solver {path!r}: cannot import module {module_name!r} ({error}).") from None
    if not hasattr(module, attr):
        raise ValueError(f"solver {path!r}: module {module_name!r} has no attribute {attr!r}.")
    return getattr(module, attr)


def _solver_class(solver: str | type[Solver]) -> type[Solver] | Solver:
    if not isinstance(solver, str):
        return solver
    if solver in BUILTIN_SOLVERS:
        return BUILTIN_SOLVERS[solver]
    if import_path_module(solver) is None:
        raise ValueError(
            f"unknown solver {solver!r}; choose one of {sorted(BUILTIN_SOLVERS)}, give a deq_core.Solver object, or an "
            "import path 'package.module:Class'."
        )
    target = _imported(solver)
    if not (isinstance(target, Solver) or (isinstance(target, type) and issubclass(target, Solver))):
        raise ValueError(f"solver {solver!r} is {target!r}, not a deq_core.Solver subclass or instance.")
    return target


def options_of(solver: SolverLike) -> dict[str, object]:
    """A solver's options (its dataclass fields) as a dict name -> value: the defaults of a class, shorthand or import
    path, an object's own values; e.g. ``options_of("anderson") == {"m": 8, "beta": 1.0, "reg": 1e-08}``."""
    target = solver if isinstance(solver, Solver) else _solver_class(solver)
    if not dataclasses.is_dataclass(target):
        return {}
    if isinstance(target, Solver):
        return {f.name: getattr(target, f.name) for f in dataclasses.fields(target)}
    return {f.name: f.default for f in dataclasses.fields(target) if f.default is not dataclasses.MISSING}


def resolve_solver(solver: SolverLike, options: Mapping[str, Any] | None = None) -> Solver:
    """The :class:`Solver` for ``solver``: an object as is; a class, shorthand or import path built with ``options``.

    Raises:
        ValueError: an unknown name, a path that does not import, or an object that is not a Solver.
        TypeError: options the solver does not have, or options given with a Solver object (set them on it).
    """
    options = dict(options or {})
    if isinstance(solver, Solver):
        if options:
            raise TypeError(f"options {sorted(options)} given with the solver object {solver!r}; set them on it.")
        return solver
    if not isinstance(solver, (str, type)):
        raise TypeError(f"solver must be a deq_core.Solver, its class or a name, got {solver!r}.")
    target = _solver_class(solver)
    if isinstance(target, Solver):  # an import path naming an instance
        return resolve_solver(target, options)
    if not issubclass(target, Solver):
        raise TypeError(f"solver class {target!r} is not a deq_core.Solver subclass.")
    known = options_of(target)
    unknown = sorted(set(options) - set(known))
    if unknown and dataclasses.is_dataclass(target):
        listing = ", ".join(f"{k}={v!r}" for k, v in known.items()) or "none"
        label = _label(solver, target)
        raise TypeError(f"unknown option(s) {unknown} for solver {label!r}; its options are {listing}.")
    return target(**options)


def _label(solver: str | type[Solver], cls: type[Solver]) -> str:
    return solver if isinstance(solver, str) else cls.__name__
