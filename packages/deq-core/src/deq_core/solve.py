"""``solve``: find z* = f(z*) with a :class:`~deq_core.Solver`, with per-sample statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._solvers import Solver, resolve_solver
from ._solvers._compile import Compiler
from ._solvers._run import SolveRun, check_every_default, iterate, residual_norms
from ._solvers.resolve import SolverLike
from ._state import FlatMap, State, StateSpec, flatten, solver_dtype, state_spec, unflatten

__all__ = ["SolverResult", "solve"]

_STOP_MODES = ("rel", "abs")
_STOP_OVER = ("sample", "batch")


@dataclass
class SolverResult:
    """Outcome of :func:`solve`. Per-sample tensors have shape (B,).

    Attributes:
        z: the best iterate found (lowest residual), in the structure, shapes and dtypes of z0.
        fz: f(z) as computed by the solver (one step further than z), same structure.
        nfe: number of calls of f made by the solver.
        iterations: number of iterations (entries of ``trace``); <= max_iter. The loop checks on the host whether a
            sample is still active every ``check_every`` iterations, so a solve may run up to ``check_every - 1``
            iterations past the one where its last sample finished (counted here and in nfe; they change no other
            result: finished samples are frozen).
        residual: residual of ``z`` per sample, in ``stop_mode`` (inf for a sample whose first f(z) was non-finite).
            For a state of lower precision than the solver's (e.g. bfloat16), that of z as returned (rounded), from
            one more call of f; ``trace`` holds the residuals of the solver's own iterates.
        converged: per sample, residual <= tol (``stop_over="sample"``); with ``stop_over="batch"``, whether the
            batch's residual met tol (the same for every finite sample; False for a non-finite one).
        nonfinite: per sample, whether its residual became NaN: f produced a NaN or Inf (or, with "abs", ||f(z) - z||
            overflowed). The sample was frozen at its best finite iterate.
        trace: (iterations, B) residual of the iterate of every iteration, in ``stop_mode`` (inf where it was NaN).
            A finished sample is evaluated at its best iterate from then on: its entries repeat that residual.
        iterations_per_sample: (B,) int64, the iteration at which each sample converged (counting from 1), or
            ``iterations`` for a sample that did not: the per-sample cost, independent of the rest of the batch
            (with ``stop_over="batch"`` every sample iterates until the batch stops: the iteration where the batch's
            residual met tol for all, else ``iterations``).
        solver, stop_mode, stop_over, tol, max_iter, check_every: the settings of the solve (``solver``: the Solver
            object used).
        states: with ``solve(..., states_at=...)``, the best iterate after each of those iterations (structured like
            z); else None.
    """

    z: State
    fz: State
    nfe: int
    iterations: int
    residual: Tensor
    converged: Tensor
    nonfinite: Tensor
    trace: Tensor
    iterations_per_sample: Tensor
    solver: Solver
    stop_mode: str
    tol: float
    max_iter: int
    states: list[State] | None = None
    stop_over: str = "sample"
    check_every: int = 1

    @property
    def all_converged(self) -> bool:
        return bool(self.converged.all())

    def summary(self) -> str:
        """One line saying how many samples converged and why the others did not."""
        batch = self.converged.numel()
        n_conv = int(self.converged.sum())
        n_bad = int(self.nonfinite.sum())
        finite = self.residual[torch.isfinite(self.residual)]
        worst = f"{float(finite.max()):.3g}" if finite.numel() else "n/a"
        rule = f"{self.stop_mode} residual <= {self.tol:g}"
        if self.stop_over == "batch":
            rule = f"the batch's {rule}"
        text = (
            f"{self.solver.name}: {n_conv}/{batch} samples converged to {rule} in {self.iterations} iterations "
            f"({self.nfe} calls of f); largest residual {worst}"
        )
        if n_bad:
            text += f"; {n_bad} sample(s) hit NaN/Inf in f and were stopped at their best finite iterate"
        return text


def check_max_iter(value: object, name: str = "max_iter", optional: bool = False) -> None:
    """The one rule of an iteration limit (a solve's, a DEQ layer's in training or eval mode, a
    :class:`~deq_core.Plan`'s, a training config's ``deq`` section): an int >= 1, not a bool; None too when
    ``optional``. ValueError naming ``name`` otherwise."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        rule = ">= 1 or None" if optional else "a number >= 1"
        whole = " (an iteration count: a whole number)" if isinstance(value, float) and value >= 1 else ""
        raise ValueError(f"{name} must be {rule}, got {value!r}{whole}.")


def check_tol(value: object, name: str = "tol", optional: bool = False) -> None:
    """The one rule of a tolerance (where :func:`check_max_iter` applies): a finite number > 0, not a bool; None too
    when ``optional``. ValueError naming ``name`` otherwise."""
    if value is None and optional:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    if not number or not value > 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be > 0{' or None' if optional else ''}, got {value!r}.")


def check_limits(max_iter: int, tol: float, stop_mode: str, stop_over: str = "sample") -> None:
    """Raise ValueError for a bad iteration limit, tolerance (:func:`check_max_iter`, :func:`check_tol`), stop mode
    or stop rule."""
    check_max_iter(max_iter)
    check_tol(tol)
    if stop_mode not in _STOP_MODES:
        raise ValueError(f"unknown stop_mode {stop_mode!r}; choose one of {list(_STOP_MODES)}.")
    if stop_over not in _STOP_OVER:
        raise ValueError(f"unknown stop_over {stop_over!r}; choose one of {list(_STOP_OVER)}.")


def check_interval(check_every: int | None) -> int | None:
    """``check_every`` if it is None or an int >= 1; TypeError / ValueError otherwise."""
    if check_every is None:
        return None
    if isinstance(check_every, bool) or not isinstance(check_every, int):
        raise TypeError(f"check_every must be an int >= 1 or None, got {check_every!r}.")
    if check_every < 1:
        raise ValueError(f"check_every must be an int >= 1 or None, got {check_every!r}.")
    return check_every


def check_capture(capture: bool, solver: Solver) -> bool:
    """``capture`` if it is a bool and, when True, ``solver`` is capturable; TypeError / ValueError otherwise."""
    if not isinstance(capture, bool):
        raise TypeError(f"capture must be True or False, got {capture!r}.")
    if capture and not solver.capturable:
        raise ValueError(
            "capture=True needs a capturable solver (FixedPoint, Anderson, Broyden without line search or memory, "
            "or a class with capturable = True); "
            f"{solver.name} is not: pass capture=False (compile_step=True compiles what it can)."
        )
    return capture


def check_states_at(states_at: Sequence[int], max_iter: int) -> tuple[int, ...]:
    """``states_at`` as a tuple; TypeError / ValueError unless it is a sequence of strictly increasing ints in
    1..max_iter."""
    message = f"states_at must be strictly increasing ints in 1..max_iter={max_iter}, got {states_at!r}."
    if not isinstance(states_at, Sequence) or isinstance(states_at, str):
        raise TypeError(message)
    its = tuple(states_at)
    in_range = all(isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= max_iter for i in its)
    if not in_range or any(a >= b for a, b in zip(its, its[1:])):
        raise ValueError(message)
    return its


def solve(
    f: Callable[[State], State],
    z0: State,
    solver: SolverLike = "anderson",
    max_iter: int = 50,
    tol: float = 1e-4,
    stop_mode: str = "rel",
    *,
    stop_over: str = "sample",
    check_every: int | None = None,
    compile_step: bool = False,
    capture: bool = False,
    states_at: Sequence[int] | None = None,
    **options: object,
) -> SolverResult:
    """Find a fixed point z* = f(z*) starting from ``z0``, without building an autograd graph.

    Args:
        f: maps a state to a state of the same structure and shapes; called on the whole batch. f must not modify
            its input in place, nor return a tensor it modifies later (the solver keeps references to iterates).
        z0: Tensor (B, ...) or tuple/list of such Tensors (e.g. one per MDEQ resolution), batch first.
        solver: a :class:`~deq_core.Solver` object (``FixedPoint(damping)``, ``Anderson(m, beta, reg)``,
            ``Broyden(memory, line_search, ls_steps, armijo)`` or a user's own), or a string: a built-in's shorthand
            (a key of :data:`deq_core.BUILTIN_SOLVERS`) or an import path "package.module:Class", built with
            ``options``.
        max_iter: the largest number of iterations; each evaluates f once (more with Broyden's line search).
        tol: a sample has converged when its residual is <= tol; it then stops changing.
        stop_mode: "rel" for ||f(z) - z|| / ||f(z)|| or "abs" for ||f(z) - z||, per sample.
        stop_over: which residual must meet tol. "sample" (the default): each sample's own; a converged sample
            stops changing while the others iterate. "batch": the residual of the whole batch, one norm over all its
            finite samples (||f(Z) - Z|| / ||f(Z)|| for "rel"), as the reference DEQ code stops; every sample iterates
            until it does. ``residual`` and ``trace`` stay per sample in both.
        check_every: iterations between two checks on the host of whether a sample is still active (the solve's only
            host synchronisations besides one check that z0 is finite; in between, convergence, freezing and the best
            iterate are kept on the device). A solve stops at the first check that finds no active sample, so up to
            ``check_every - 1`` iterations (and calls of f) may follow the last sample's convergence: the price of
            fewer synchronisations, worth it on a GPU where each one stalls the queue of kernels. None (the default):
            1 on the CPU (a check costs nothing there), 4 on other devices.
        compile_step: compile the solver's work between two calls of f with ``torch.compile``; f runs eagerly. A
            capturable solver (:attr:`~deq_core.Solver.capturable`: FixedPoint, Anderson, Broyden without line search
            or memory) is traced with the loop's bookkeeping into one graph per iteration; another solver compiles the
            kernels it routes through :meth:`~deq_core.Loop.compiled`. The same iterates up to rounding, the
            same NFE; the first solve of a shape compiles (seconds), later ones reuse the compiled graph. Where
            torch.compile does not work (e.g. no C++ compiler), a RuntimeWarning says why and the solve runs eagerly.
        capture: run the iterations between two host checks as one compiled graph, f included (on CUDA with
            ``mode="reduce-overhead"``: a CUDA graph, replayed); the first iteration runs eagerly. Set
            ``check_every=max_iter`` to run the whole solve as one graph. Needs a capturable solver (a ValueError
            otherwise) and an f that torch.compile traces without a graph break (a RuntimeError at the first solve
            otherwise). The same checks on the host, NFE and per-sample results as eager, the iterates up to rounding;
            one graph per distinct number of iterations between two stops (checks, ``states_at``, max_iter).
        states_at: iterations (strictly increasing, in 1..max_iter) after which to keep the best iterate so far,
            returned in ``SolverResult.states`` (one state-sized copy each, whatever max_iter). Iteration 1
            evaluates z0, iteration i the solver's (i-1)-th step. A sample that converged before iteration i stands
            at its z there, and so does every sample when the solve stopped before i.
        **options: options of a solver given as a string, checked by name (see :func:`~deq_core.options_of`), e.g.
            ``solve(f, z0, "broyden", memory=10)``.

    The solver computes in float64 when the state has a float64 tensor and in float32 otherwise (also for
    bfloat16/float16 states); f itself runs in the state's dtypes and must return them, on the state's device
    (checked at the first call; under autocast a lower-precision float result is accepted). The solve stops when
    every sample has converged or produced a NaN/Inf, or after ``max_iter`` iterations. An empty batch (B = 0)
    returns an empty, converged result without calling f.

    Raises:
        TypeError / ValueError: a bad solver, settings or options (naming them), or f's first result of another
            structure, shape, dtype or device than the state (naming f).

    Returns:
        SolverResult with the best iterate per sample and its statistics.
    """
    solver = resolve_solver(solver, options)
    check_limits(max_iter, tol, stop_mode, stop_over)
    keep = None if states_at is None else check_states_at(states_at, max_iter)
    compiler = Compiler(compile_step, check_capture(capture, solver))
    spec = state_spec(z0)
    interval = check_interval(check_every) or check_every_default(spec.device)
    dtype = solver_dtype(spec.dtypes)
    settings = dict(solver=solver, stop_mode=stop_mode, stop_over=stop_over, tol=float(tol), max_iter=max_iter,
                    check_every=interval)  # fmt: skip
    with torch.no_grad():
        x0 = flatten(z0, dtype)  # may be z0 itself: only read (the loop copies it into its buffers)
        if spec.batch_size == 0:  # nothing to solve (e.g. an empty last batch): f is not called
            x0 = x0.clone()
            empty = x0.new_zeros(0)
            kept = None if keep is None else [unflatten(x0, spec) for _ in keep]
            return SolverResult(
                z=unflatten(x0, spec), fz=unflatten(x0, spec), nfe=0, iterations=0, residual=empty,
                converged=empty.bool(), nonfinite=empty.bool(), trace=x0.new_zeros(0, 0),
                iterations_per_sample=empty.long(), states=kept, **settings,
            )  # fmt: skip
        if not float(torch.linalg.vector_norm(x0, ord=math.inf)) < math.inf:  # NaN or inf: one host read
            raise ValueError("z0 contains NaN or Inf; start the solver from a finite state (e.g. zeros).")
        run = SolveRun(FlatMap(f, spec, dtype), x0, max_iter=max_iter, tol=float(tol), stop_mode=stop_mode,
                       stop_over=stop_over, check_every=interval, compiler=compiler, keep=keep or ())  # fmt: skip
        iterate(solver, run)
        trace = torch.stack(run.trace).view(run.iterations, spec.batch_size).nan_to_num_(nan=math.inf)
        nonfinite = run.best_residual.view(-1).isnan()
        z, fz, residual, nonfinite = _best_iterate(run, spec, dtype, trace.amin(dim=0), nonfinite)
        converged, per_sample = _convergence(run, trace, residual, nonfinite)
        states = None if keep is None else [z if i not in run.kept else unflatten(run.kept[i], spec) for i in keep]
        return SolverResult(
            z=z, fz=fz, nfe=run.nfe, iterations=run.iterations, residual=residual, converged=converged,
            nonfinite=nonfinite, trace=trace, iterations_per_sample=per_sample, states=states, **settings,
        )  # fmt: skip


def _convergence(run: SolveRun, trace: Tensor, residual: Tensor, nonfinite: Tensor) -> tuple[Tensor, Tensor]:
    """(converged, iterations_per_sample), both (B,), from the trace (iterations, B) and the residual of z (B,).

    Sample rule: converged where the residual is <= tol, at the first iteration whose residual was (the iterations
    whose residual stayed above tol, counted up to the first that did not, plus that one). Batch rule: where the
    batch's residual met tol (finite samples only), all at the first iteration where it did (else ``iterations``).
    """
    tol = run.tol
    if run.stop_over == "batch":
        reached = torch.stack(run.batch_trace) <= tol  # (iterations,)
        stopped = reached.any()
        first = reached.to(torch.int64).argmax() + 1
        per_sample = torch.where(stopped, first, run.iterations).expand_as(nonfinite)
        return stopped & ~nonfinite, per_sample
    converged = residual <= tol
    above = (trace > tol).cumprod(dim=0).sum(dim=0)  # iterations before the first at or below tol
    return converged, above + converged


def _best_iterate(
    run: SolveRun, spec: StateSpec, dtype: torch.dtype, residual: Tensor, nonfinite: Tensor
) -> tuple[State, State, Tensor, Tensor]:
    """(z, f(z), residual, nonfinite) of the iterate returned to the user, from the solver's best iterate, its
    ``residual`` and ``nonfinite`` flags (B,).

    When a tensor of the state has a lower precision than the solver's dtype (bfloat16 / float16 states, or the
    float32 part of a mixed float32 / float64 tuple), the returned z is the best iterate rounded to the state's
    dtypes, whose residual can be well above that of the solver's iterate: f is called once more (counted in nfe)
    at the rounded z, and its residual, f(z) and non-finite flag are the ones reported.
    """
    z = unflatten(run.best_x, spec)
    if all(d == dtype for d in spec.dtypes):
        return z, unflatten(run.best_fx, spec), residual, nonfinite
    x = flatten(z, dtype)
    fx = run.call(x)
    _, rounded, good = residual_norms(x, fx, run.stop_mode)
    return z, unflatten(fx, spec), torch.where(good, rounded, math.inf), nonfinite | ~good
