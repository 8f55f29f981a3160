"""The solver protocol: :class:`Solver` (``init`` / ``step``), what a step returns (:class:`Step`) and what a solver
may ask of the loop that runs it (:class:`Loop`).

:func:`deq_core.solve` owns the one loop that runs every solver and all of its bookkeeping: calls of f and their
count, per-sample residuals, freezing of finished samples, the best iterate, NaN / Inf isolation and the trace. A
solver only proposes the next iterate from the current one. All tensors a solver sees are flat, (B, D), in the
solver dtype (float64 when the state has a float64 tensor, else float32); B is the batch, D the state size per
sample.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from torch import Tensor

if TYPE_CHECKING:
    from ._run import SolveRun

Fn = TypeVar("Fn", bound=Callable[..., object])


class Step(NamedTuple):
    """What :meth:`Solver.step` returns.

    Attributes:
        z: (B, D) the proposed next iterate. The loop copies it into its own buffer, with the rows of finished samples
            (converged or non-finite) set to their best iterate, so a solver may propose anything in those rows and
            may reuse the memory of z in its next step.
        state: the solver's state for the next step (the same object, updated in place, is fine).
        fz: f(z) when the solver already evaluated it through :meth:`Loop.trial` (z then being the iterate that
            call returned), else None: the loop calls f.
        temporary: kept for compatibility, without effect (the loop always copies z).
    """

    z: Tensor
    state: Any
    fz: Tensor | None = None
    temporary: bool = False


class Loop:
    """The view of the running solve that a solver's ``init`` and ``step`` get: limits, the samples still iterating,
    and counted calls of f for solvers that evaluate trial points (e.g. a line search). Not constructed by users."""

    __slots__ = ("_run",)

    def __init__(self, run: SolveRun) -> None:
        self._run = run

    @property
    def max_iter(self) -> int:
        """The iteration limit of this solve (a history needs no more than max_iter - 1 entries)."""
        return self._run.max_iter

    @property
    def iteration(self) -> int:
        """Iterations (evaluations of an iterate) done so far; 1 when ``init`` is called."""
        return self._run.iterations

    @property
    def active(self) -> Tensor:
        """Bool (B,): samples still iterating (neither converged nor stopped by NaN / Inf), on the device (reading it
        on the host waits for the device)."""
        return self._run.active.view(-1)

    @property
    def compiling(self) -> bool:
        """Whether the solve compiles (``compile_step=True`` or ``capture=True``, and torch.compile works here): a
        capturable solver (:attr:`Solver.capturable`) then takes its capturable form, which the loop traces; another
        solver may route its kernels through :meth:`compiled`."""
        return self._run.compiler.enabled

    def compiled(self, kernel: Fn, *, dynamic: bool = False) -> Fn:
        """``kernel`` compiled with torch.compile when the solve runs with ``compile_step=True`` (and torch.compile
        works here), else ``kernel`` itself. For a solver's tensor work between two calls of f: a function whose
        Python arguments do not change between iterations (pass changing numbers as tensors, or torch compiles it
        again for each value); it may update tensors of the state in place. Its shapes should be fixed; where they
        change between iterations (e.g. a growing history passed as a slice), pass ``dynamic=True`` so that torch
        compiles it with symbolic sizes instead of once per shape."""
        return self._run.compiler(kernel, dynamic)

    def trial(self, z: Tensor, *, temporary: bool = False) -> tuple[Tensor, Tensor]:
        """Evaluate f at a trial point: returns (z', f(z')), z' being ``z`` with the rows of finished samples set to
        their best iterate (new tensors). Counted in the solve's NFE; not an iteration (the loop records only the
        iterate a step returns). ``temporary``: kept for compatibility, without effect."""
        z = self._run.freeze(z)
        return z, self._run.call(z)


class Solver(abc.ABC):
    """Base class of fixed-point solvers for z* = f(z*), usable everywhere a built-in solver is (``deq_core.solve``,
    the forward and the implicit backward of ``deq_core.DEQ``, task configs by import path).

    Write a solver as a frozen dataclass whose fields are its options (checked in ``__post_init__``), with:

    - ``init(z, fz, g, loop) -> state``: called once with the first iterate z0, f(z0) and g = f(z0) - z0, all (B, D);
      allocate buffers here (``loop.max_iter`` bounds any history).
    - ``step(state, z, fz, g, loop) -> Step``: from the current iterate z, f(z), g = f(z) - z, propose the next one.

    The loop calls f, counts calls, computes residuals, keeps the best iterate per sample, stops finished samples and
    isolates NaN / Inf; a step never evaluates f except through ``loop.trial``. The tensors passed in are rows of the
    loop's buffers: never modify them in place, and keep them for one step at most (the iteration after next
    overwrites them: copy what a solver needs for longer). In the iteration where a sample fails, its rows may hold
    NaN / Inf; whatever the step computes for that sample is discarded, so keep samples independent (no reduction
    over the batch).

    Attribute ``capturable`` (a class attribute, default False; a property where it depends on the options, as
    Broyden's): True declares that, when ``loop.compiling`` is True, ``init`` returns a state that is None or a tuple
    (e.g. a NamedTuple) of tensors, and ``step`` is a pure function of its tensors: fixed shapes, no read of a tensor's
    value on the host, no Python number that changes from step to step (keep counters in tensors), no in-place change of
    its inputs or of the state (it returns the next state: new tensors of the same shapes), no ``loop.trial``,
    ``loop.iteration`` or ``loop.active``. The loop then traces the step into one graph with its own bookkeeping
    (``compile_step=True``; f runs eagerly between two graphs) or with f over the iterations between two host checks
    (``capture=True``). A solver that is not capturable runs eagerly, its kernels through :meth:`Loop.compiled` with
    ``compile_step=True``; ``capture=True`` refuses it.
    """

    capturable: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """Short label used in summaries and error messages (built-ins: their shorthand string)."""
        return type(self).__name__

    @abc.abstractmethod
    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Any:
        """The solver's state before the first step."""

    @abc.abstractmethod
    def step(self, state: Any, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        """The next iterate (see :class:`Step`) from the current iterate z, f(z) and g = f(z) - z, all (B, D)."""
