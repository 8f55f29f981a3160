"""Bookkeeping shared by every solver: counting calls of f, per-sample residuals, the best iterate, convergence,
freezing of finished samples, non-finite values, and the residual trace.

:func:`iterate` is the one loop that runs every :class:`~deq_core.Solver` on a :class:`SolveRun`: it evaluates the
first iterate with :meth:`SolveRun.evaluate`, then, ``while not run.finished``, asks the solver for a new iterate,
passes it through :meth:`SolveRun.freeze` (finished samples keep their iterate) and :meth:`SolveRun.evaluate`. One call
of ``evaluate`` is one iteration and one entry of the trace.

Cost per iteration: the residual needs one subtraction and one (two with ``stop_mode="rel"``) norm pass over the
(B, D) iterate; every other decision is taken on (B,) tensors, and the per-sample flags reach the host in one
transfer per iteration (one device sync), from which the loop condition and the rows to update are read. Rows are
selected by copying (never by multiplying with a mask, so a NaN cannot leak): on the CPU by copying just the rows
that change (torch.where on a broadcast bool mask runs a scalar loop there, ~10x slower than a copy), on other
devices by torch.where.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ._compile import Compiler
from .base import Loop

if TYPE_CHECKING:
    from .base import Solver

_INF = float("inf")
# Above this many separate runs of rows, one index_copy_ replaces the row-by-row copies.
_MAX_ROW_RUNS = 8


def _runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted row indices as half-open runs of consecutive rows: [0, 1, 2, 5] -> [(0, 3), (5, 6)]."""
    out: list[tuple[int, int]] = []
    for i in rows:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def copy_rows(dst: Tensor, src: Tensor, rows: Sequence[int]) -> Tensor:
    """dst[rows] = src[rows] in place (rows: sorted host indices into dim 0); returns dst."""
    if not rows:
        return dst
    runs = _runs(rows)
    if len(runs) == 1 and runs[0] == (0, dst.shape[0]):
        dst.copy_(src)
    elif len(runs) <= _MAX_ROW_RUNS:
        for a, b in runs:
            dst[a:b].copy_(src[a:b])
    else:
        index = torch.tensor(list(rows), dtype=torch.long, device=dst.device)
        dst.index_copy_(0, index, src.index_select(0, index))
    return dst


def residual_norms(x: Tensor, fx: Tensor, stop_mode: str) -> tuple[Tensor, Tensor, Tensor]:
    """(g, residual, good) for iterates x and f(x), (B, D): g = f(x) - x, the residual per sample in ``stop_mode``
    ("rel": ||g|| / ||f(x)||, 0 where x = f(x) = 0; "abs": ||g||), and whether both norms are finite (where not,
    the residual is meaningless: callers replace it by inf)."""
    gx = fx - x
    res = torch.linalg.vector_norm(gx, dim=1)
    if stop_mode == "rel":
        f_norm = torch.linalg.vector_norm(fx, dim=1)
        good = torch.maximum(res, f_norm) < _INF  # maximum propagates NaN: both norms are finite
        res = (res / f_norm).nan_to_num_(nan=0.0, posinf=_INF)  # a NaN here is 0/0 (x = f(x) = 0) or not good
    else:
        good = res < _INF
    return gx, res, good


def iteration_statistics(
    x: Tensor, fx: Tensor, finite: Tensor, best_residual: Tensor, tol: float, stop_mode: str, stop_over: str = "sample"
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The per-sample decisions of one iteration, on the device, from the iterates x, f(x) (B, D) and the (B,) state
    before it (``finite``: no NaN / Inf so far; ``best_residual``).

    ``stop_over="sample"``: a sample stops once its own best residual is <= tol. ``stop_over="batch"``: every finite
    sample stops once the residual of the whole batch is <= tol, one norm over all its finite samples:
    ||f(X) - X|| / ||f(X)|| ("rel") or ||f(X) - X|| ("abs"), X the (B, D) iterate (the reference DEQ code's rule).

    Returns (g, residual, good, better, best_residual, active, finite, flags): g = f(x) - x (B, D); the residual
    (inf where not finite), whether x and f(x) are finite, whether the residual improved on the best, the new best
    residual, the samples still iterating, the new finite flags (all (B,)); and flags = (good, better, active) stacked,
    (3, B) bool, the one tensor the loop reads on the host. A pure function of fixed shapes.
    """
    gx, res, good = residual_norms(x, fx, stop_mode)
    finite = finite & good
    if stop_over == "batch":
        active = finite & (batch_residual(gx, fx, finite, stop_mode) > tol)
    res = torch.where(finite, res, _INF)
    better = res < best_residual
    best_residual = torch.minimum(res, best_residual)
    if stop_over != "batch":
        active = (best_residual > tol) & finite
    return gx, res, good, better, best_residual, active, finite, torch.stack([good, better, active])


def batch_residual(gx: Tensor, fx: Tensor, finite: Tensor, stop_mode: str) -> Tensor:
    """The residual of the batch's finite samples as one vector, a 0-d tensor: ||G|| / ||F|| ("rel", 0 where both are
    0) or ||G|| ("abs"), with G = f(X) - X and F = f(X) over the rows where ``finite`` (B,) holds (gx, fx: (B, D))."""
    keep = finite[:, None]
    g_norm = torch.linalg.vector_norm(torch.where(keep, gx, 0.0))
    if stop_mode != "rel":
        return g_norm
    return (g_norm / torch.linalg.vector_norm(torch.where(keep, fx, 0.0))).nan_to_num_(nan=0.0)


def rowwise_copies(t: Tensor) -> bool:
    """Whether rows of ``t`` are selected by host-indexed copies (CPU) rather than torch.where (other devices)."""
    return t.device.type == "cpu"


class SolveRun:
    """Per-sample state of one solve on flat (B, D) iterates.

    Args:
        fn: the map on flat tensors, (B, D) -> (B, D).
        x0: first iterate, (B, D), in the solver dtype. Not modified (the solvers never write into iterates).
        max_iter: the largest number of iterations (calls of ``evaluate``).
        tol: residual at or below which a sample has converged.
        stop_mode: "rel" (||f(z) - z|| / ||f(z)||) or "abs" (||f(z) - z||), norms over each sample's D values.
        stop_over: "sample" (each sample stops when its residual meets tol) or "batch" (every sample stops when the
            residual of the whole batch does; see :func:`iteration_statistics`).
        compiler: what :meth:`~deq_core.Loop.compiled` applies to a solver's kernels (torch.compile with
            ``compile_step=True``; default: none, eager).
        keep: iterations after which a copy of the best iterate is kept in ``kept`` (iteration -> (B, D) tensor).
    """

    def __init__(
        self, fn: Callable[[Tensor], Tensor], x0: Tensor, max_iter: int, tol: float, stop_mode: str,
        compiler: Compiler | None = None, keep: Sequence[int] = (), stop_over: str = "sample",
    ) -> None:  # fmt: skip
        self._fn = fn
        self.compiler = compiler or Compiler(False)
        self.max_iter = max_iter
        self.tol = tol
        self.stop_mode = stop_mode
        self.stop_over = stop_over
        self.nfe = 0
        self.iterations = 0
        batch = x0.shape[0]
        self.batch = batch
        # The best iterate and f there. They alias solver tensors (never modified in place) until a partial update
        # needs buffers of their own (_best_owned), which are then updated row by row.
        self.best_x = x0
        self.best_fx = x0
        self._best_owned = False
        self.best_residual = torch.full((batch,), _INF, dtype=x0.dtype, device=x0.device)
        self._finite = torch.ones(batch, dtype=torch.bool, device=x0.device)  # ~nonfinite
        self._active = self._finite
        self.trace: list[Tensor] = []
        self._rowwise = rowwise_copies(x0)
        self._all_done = False
        self._active_rows: list[int] = list(range(batch))
        self._frozen_rows: list[int] = []
        self._keep = frozenset(keep)
        self.kept: dict[int, Tensor] = {}

    def call(self, x: Tensor) -> Tensor:
        """One counted call of f, without bookkeeping (trial points of a step, :meth:`~deq_core.Loop.trial`)."""
        self.nfe += 1
        return self._fn(x)

    @property
    def active(self) -> Tensor:
        """Bool (B,): samples still iterating (neither converged nor failed with a non-finite value)."""
        return self._active

    @property
    def converged(self) -> Tensor:
        """Bool (B,): best residual <= tol (``stop_over="sample"``), or the batch's residual met tol and the sample is
        finite (``"batch"``: then a finite sample stops only when the batch's residual meets tol)."""
        if self.stop_over == "batch":
            return self._finite & ~self._active
        return self.best_residual <= self.tol

    @property
    def nonfinite(self) -> Tensor:
        """Bool (B,): f produced a NaN or Inf for the sample (it was frozen at its best finite iterate)."""
        return ~self._finite

    @property
    def all_active(self) -> bool:
        return not self._frozen_rows

    @property
    def active_rows(self) -> list[int]:
        """Host list of the active samples (as of the last :meth:`evaluate`)."""
        return self._active_rows

    @property
    def finished(self) -> bool:
        return self._all_done or self.iterations >= self.max_iter

    def freeze(self, x_new: Tensor, x_old: Tensor, *, owned: bool = False) -> Tensor:
        """``x_new`` for active samples, ``x_old`` for finished ones (copies: a NaN in x_new cannot leak).

        ``owned``: x_new is a temporary of the caller that may be overwritten (its finished rows are replaced in
        place); otherwise a new tensor is returned.
        """
        if not self._frozen_rows:
            return x_new
        if not self._rowwise:
            return torch.where(self._active[:, None], x_new, x_old)
        if owned:
            return copy_rows(x_new, x_old, self._frozen_rows)
        if len(self._frozen_rows) * 2 >= self.batch:
            return copy_rows(x_old.clone(), x_new, self._active_rows)
        return copy_rows(x_new.clone(), x_old, self._frozen_rows)

    def evaluate(self, x: Tensor, fx: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Evaluate f at x (unless ``fx`` is given, already counted), record the iteration, return (x, f(x), g).

        Samples whose x or f(x) holds a NaN or Inf are marked non-finite and frozen; in the returned tensors their
        rows are replaced by their best iterate so that no NaN enters any solver buffer. (A NaN or Inf anywhere in x or
        f(x) makes ||f(x) - x|| non-finite, so the check costs nothing beyond the residual itself.)
        """
        if fx is None:
            fx = self.call(x)
        # Eager also with compile_step=True: on the CPU, inductor's kernel for the two norms was measured slower than
        # ATen's, and each compiled call adds ~10 us (benchmarks/compiled_step.py prints both).
        gx, res, good, better, best_residual, active, finite, flags = iteration_statistics(
            x, fx, self._finite, self.best_residual, self.tol, self.stop_mode, self.stop_over
        )
        # The one host transfer of the iteration: the stop test and every per-sample decision below are read from it.
        good_flags, better_flags, active_flags = flags.tolist()
        bad_rows = [i for i, v in enumerate(good_flags) if not v]
        if bad_rows:
            if self._rowwise:
                x = copy_rows(x.clone(), self.best_x, bad_rows)
                fx = copy_rows(fx.clone(), self.best_fx, bad_rows)
            else:
                x = torch.where(good[:, None], x, self.best_x)
                fx = torch.where(good[:, None], fx, self.best_fx)
            gx = fx - x
        better_rows = [i for i, v in enumerate(better_flags) if v]
        if len(better_rows) == self.batch:  # iterates are never modified in place by the solvers: keep references
            self.best_x, self.best_fx = x, fx
            self._best_owned = False
        elif better_rows:
            self._update_best(x, fx, better, better_rows)
        self.best_residual = best_residual
        self._finite = finite
        self._active = active
        self.trace.append(res)
        self.iterations += 1
        self._active_rows = [i for i, v in enumerate(active_flags) if v]
        self._frozen_rows = [i for i, v in enumerate(active_flags) if not v]
        self._all_done = not self._active_rows
        if self.iterations in self._keep:  # a copy: the best iterate's buffers may be updated in place later
            self.kept[self.iterations] = self.best_x.clone()
        return x, fx, gx

    def _update_best(self, x: Tensor, fx: Tensor, better: Tensor, rows: list[int]) -> None:
        if not self._rowwise:
            self.best_x = torch.where(better[:, None], x, self.best_x)
            self.best_fx = torch.where(better[:, None], fx, self.best_fx)
            return
        if not self._best_owned:  # own buffers: start from whichever side supplies more rows, copy the others
            if len(rows) * 2 >= self.batch:
                taken = set(rows)
                others = [i for i in range(self.batch) if i not in taken]
                self.best_x = copy_rows(x.clone(), self.best_x, others)
                self.best_fx = copy_rows(fx.clone(), self.best_fx, others)
            else:
                self.best_x = copy_rows(self.best_x.clone(), x, rows)
                self.best_fx = copy_rows(self.best_fx.clone(), fx, rows)
            self._best_owned = True
            return
        copy_rows(self.best_x, x, rows)
        copy_rows(self.best_fx, fx, rows)


def iterate(solver: Solver, run: SolveRun, x0: Tensor) -> None:
    """Run ``solver`` from ``x0`` (B, D) until every sample has finished or ``run.max_iter`` iterations were made; the
    results are in ``run`` (best iterate, residuals, trace, NFE)."""
    loop = Loop(run)
    x, fx, gx = run.evaluate(x0)
    state = solver.init(x, fx, gx, loop)
    while not run.finished:
        loop._z = x
        step = solver.step(state, x, fx, gx, loop)
        state = step.state
        z = step.z if step.fz is not None else run.freeze(step.z, x, owned=step.temporary)
        x, fx, gx = run.evaluate(z, step.fz)
