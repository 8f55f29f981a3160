"""Bookkeeping shared by every solver, kept on the device: calls of f and their count, per-sample residuals, the best
iterate, convergence, freezing of finished samples, NaN / Inf isolation and the residual trace.

:func:`iterate` is the one loop that runs every :class:`~deq_core.Solver` on a :class:`SolveRun`: the run evaluates
z0, then, until it has finished, the solver proposes a new iterate and :meth:`SolveRun.advance` freezes the finished
samples' rows, calls f and records the iteration. One call of ``advance`` (or the first evaluation) is one iteration
and one entry of the trace.

Built for a device where every operation is a kernel launch and reading a value on the host waits for the device:

- No host synchronisation between checks: every per-sample decision (converged, failed, improved, still active) is a
  (B, 1) tensor on the device, and rows are selected with ``torch.where`` on it. The host reads the active flags once
  every ``check_every`` iterations (and after the last), to stop when no sample is left. A solve therefore runs up to
  ``check_every - 1`` iterations past the one where its last sample finished; they are counted (nfe, iterations and
  trace are those of the iterations run) and change no result, since a finished sample is frozen.
- Few operations per iteration (10 for the relative residual, each a fixed-shape kernel; ``benchmarks/loop_costs.py``
  counts them): the buffers are allocated once per solve, with every view the loop needs made then, so that an
  iteration dispatches no view; iterates live in two alternating buffers of rows [g, f(z), z] (g = f(z) - z), laid
  out so that one norm kernel gives ||g|| and ||f(z)|| of the iteration and one ``where`` updates the best [f(z), z].
- Sample states: a sample is active until it converges (sample rule: its residual <= tol; batch rule: the batch's) or
  its residual is NaN (f returned a NaN or Inf, see :meth:`SolveRun.advance`). The best residual per sample doubles
  as the failure flag: a NaN residual makes it NaN (``torch.minimum`` propagates NaN), which no later residual improves
  on and which is never > tol, so the failed sample stays frozen at its best finite iterate.

A finished sample is frozen at its best iterate: its row of the next iterate is copied from the best one, so f never
sees a NaN that the solver proposed for a failed sample, and a converged sample's residual stays that of its converged
iterate. The rows a solver gets for an iteration where a sample failed may hold NaN / Inf (the failing iterate and its
f); whatever a solver computes from them for that sample is discarded, so a solver only has to keep its samples
independent (no reduction over the batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .._state import FlatMap
from ._compile import Compiler
from ._graph import Progress, iterate_captured, iterate_compiled
from .base import Loop

if TYPE_CHECKING:
    from .base import Solver

_INF = float("inf")


def residual_norms(x: Tensor, fx: Tensor, stop_mode: str) -> tuple[Tensor, Tensor, Tensor]:
    """(g, residual, good) for iterates x and f(x), (B, D): g = f(x) - x, the residual per sample in ``stop_mode``
    ("rel": ||g|| / ||f(x)||, 0 where x = f(x) = 0; "abs": ||g||), and whether both norms are finite (where not,
    the residual is meaningless: callers replace it by inf). For one-off evaluations outside the loop."""
    gx = fx - x
    res = torch.linalg.vector_norm(gx, dim=1)
    if stop_mode == "rel":
        f_norm = torch.linalg.vector_norm(fx, dim=1)
        good = torch.maximum(res, f_norm) < _INF  # maximum propagates NaN: both norms are finite
        res = (res / f_norm).nan_to_num_(nan=0.0, posinf=_INF)  # a NaN here is 0/0 (x = f(x) = 0) or not good
    else:
        good = res < _INF
    return gx, res, good


def check_every_default(device: torch.device) -> int:
    """The default interval between host checks: 1 on the CPU, where reading the flags costs a memory read and each
    check can save calls of f; 4 on other devices, where a read waits for the device to finish the queued work."""
    return 1 if device.type == "cpu" else 4


@dataclass(frozen=True)
class _Slot:
    """One of the two iterate buffers: rows g, f(z), z (B, D) of one (3, B, D) block, with the views [g, f(z)] (the
    norms' input) and [f(z), z] (what the best iterate copies), and the call of f from z into f(z)."""

    g: Tensor
    fz: Tensor
    z: Tensor
    g_fz: Tensor
    fz_z: Tensor
    call: Callable[[], None]


class SolveRun:
    """Per-sample state of one solve on flat (B, D) iterates, on their device.

    Args:
        fn: f on flat tensors (:class:`~deq_core._state.FlatMap`).
        x0: first iterate, (B, D), in the solver dtype; never modified (the loop copies it).
        max_iter: the largest number of iterations.
        tol: residual at or below which a sample has converged.
        stop_mode: "rel" (||f(z) - z|| / ||f(z)||) or "abs" (||f(z) - z||), norms over each sample's D values.
        stop_over: "sample" (each sample stops when its residual meets tol) or "batch" (every sample stops when the
            residual of the whole batch does: one norm over its finite samples, ||G|| / ||F|| or ||G||).
        check_every: iterations between two reads of the active flags on the host (>= 1).
        compiler: what :meth:`~deq_core.Loop.compiled` applies to a solver's kernels (torch.compile with
            ``compile_step=True``; default: none, eager).
        keep: iterations after which a copy of the best iterate is kept in ``kept`` (iteration -> (B, D) tensor).
    """

    def __init__(
        self, fn: FlatMap, x0: Tensor, max_iter: int, tol: float, stop_mode: str, stop_over: str = "sample",
        check_every: int = 1, compiler: Compiler | None = None, keep: Sequence[int] = (),
    ) -> None:  # fmt: skip
        self.fn = fn
        self.compiler = compiler or Compiler(False)
        self.max_iter, self.tol, self.stop_mode, self.stop_over = max_iter, tol, stop_mode, stop_over
        self.check_every = check_every
        self.nfe = 0
        self.iterations = 0
        self.finished = False
        self.x0 = x0
        self._slots: tuple[_Slot, ...] = ()  # the eager loop's iterate buffers, made by evaluate_first
        self._best = torch.stack([x0, x0])  # f(z) and z of the best iterate per sample
        self.best_fx, self.best_x = self._best.unbind(0)
        # Best residual per sample, (B, 1); NaN once the sample failed (see the module docstring).
        self.best_residual = x0.new_full((x0.shape[0], 1), _INF)
        self._tiny = torch.finfo(x0.dtype).tiny
        self._huge = torch.finfo(x0.dtype).max
        self.active = self.best_residual > tol  # (B, 1) bool: samples still iterating
        self.trace: list[Tensor] = []  # (B, 1) residual of each iteration
        self.batch_trace: list[Tensor] = []  # stop_over="batch": the batch's residual of each iteration, 0-d
        self._keep = frozenset(keep)
        self.kept: dict[int, Tensor] = {}

    def _allocate(self) -> None:
        """The eager loop's buffers: two blocks of rows [g, f(z), z] (slot 0 holding z0) and the norms."""
        x0 = self.x0
        batch, dim = x0.shape
        block = x0.new_empty(6, batch, dim)  # slot 0: g, f(z), z; slot 1: the same
        rows = block.unbind(0)
        pairs = block.as_strided((5, 2, batch, dim), (batch * dim, batch * dim, dim, 1)).unbind(0)  # rows i, i + 1
        self._slots = tuple(
            _Slot(rows[i], rows[i + 1], rows[i + 2], pairs[i], pairs[i + 1], self.fn.bind(rows[i + 2], rows[i + 1]))
            for i in (0, 3)
        )
        self._slot = self._slots[0]
        self._slot.z.copy_(x0)
        norms = x0.new_empty(2, batch, 1)  # ||g|| and ||f(z)|| of the current iterate per sample
        self._norms = norms
        self._g_norm, self._f_norm = norms.unbind(0)

    @property
    def progress(self) -> Progress:
        """The per-sample standing (best iterate, best residual, active flags): the loop's buffers, no copy."""
        return Progress(self._best, self.best_residual, self.active)

    def settle(self, progress: Progress) -> None:
        """Take ``progress`` (new tensors from a graph) as the standing of the solve."""
        self._best, self.best_residual, self.active = progress
        self.best_fx, self.best_x = self._best.unbind(0)

    def record(self, residuals: Sequence[Tensor], batch: Sequence[Tensor]) -> None:
        """Count the iterations whose residuals ((B, 1) each) a graph computed (and the batch's, 0-d each, with
        ``stop_over="batch"``), the standing being the one after the last of them; then check as :meth:`_record`."""
        self.trace.extend(residuals)
        self.batch_trace.extend(batch)
        self._count(len(residuals))

    @property
    def current(self) -> tuple[Tensor, Tensor, Tensor]:
        """(z, f(z), g) of the last iteration, (B, D) each: the rows of the loop's buffer (valid until the iteration
        after next overwrites them)."""
        return self._slot.z, self._slot.fz, self._slot.g

    def call(self, x: Tensor) -> Tensor:
        """One counted call of f at x (B, D), without bookkeeping (trial points, :meth:`~deq_core.Loop.trial`)."""
        self.nfe += 1
        return self.fn(x)

    def freeze(self, x: Tensor) -> Tensor:
        """``x`` (B, D) with the rows of finished samples replaced by their best iterate (a new tensor)."""
        return torch.where(self.active, x, self.best_x)

    def evaluate_first(self) -> None:
        """Iteration 1: f at z0."""
        self._allocate()
        self.nfe += 1
        self._slot.call()
        self._record()

    def advance(self, z: Tensor, fz: Tensor | None = None) -> None:
        """The next iteration: ``z`` (B, D) with finished samples frozen at their best iterate, f there (unless the
        step already evaluated it at the frozen ``z``: ``fz``), and its statistics."""
        slot = self._slots[self.iterations % 2]
        self._slot = slot
        if fz is None:
            torch.where(self.active, z, self.best_x, out=slot.z)
            self.nfe += 1
            slot.call()
        else:
            slot.z.copy_(z)
            slot.fz.copy_(fz)
        self._record()

    def _record(self) -> None:
        """The statistics of the iterate in the current slot, all on the device; then, every ``check_every``
        iterations, the one host read of the solve's progress.

        The residual is NaN where f(z) holds a NaN or an Inf ("rel": ||g|| and ||f(z)|| are then NaN or both
        infinite; "abs": an infinite ||g|| is made NaN by ``remainder``, which leaves finite values unchanged), or
        where z holds a NaN: the sample fails. ("rel" with an infinite z and a finite f(z) gives inf: the sample is
        not improved and iterates on.) ||f(z)|| is taken at least the smallest normal number, so x = f(x) = 0 has
        residual 0.
        """
        slot = self._slot
        torch.sub(slot.fz, slot.z, out=slot.g)
        torch.linalg.vector_norm(slot.g_fz, dim=-1, keepdim=True, out=self._norms)
        if self.stop_mode == "rel":
            self._f_norm.clamp_min_(self._tiny)
            res = torch.div(self._g_norm, self._f_norm)
        else:
            res = torch.remainder(self._g_norm, self._huge)
        better = res < self.best_residual  # False for NaN
        torch.minimum(self.best_residual, res, out=self.best_residual)  # NaN for a failed sample, from now on
        torch.where(better, slot.fz_z, self._best, out=self._best)
        if self.stop_over == "batch":
            self.active = self._batch_active()
        else:
            self.active = self.best_residual > self.tol  # False for converged and failed samples
        self.trace.append(res)
        self._count(1)

    def _count(self, iterations: int) -> None:
        """Count ``iterations`` more (the statistics already recorded); keep the best iterate where asked, stop at
        max_iter, and read the active flags on the host when a check is due."""
        self.iterations += iterations
        if self.iterations in self._keep:  # a copy: the best iterate's buffer is updated in place later
            self.kept[self.iterations] = self.best_x.clone()
        if self.iterations >= self.max_iter:
            self.finished = True
        elif self.iterations % self.check_every == 0:
            self.finished = not any(flag for (flag,) in self.active.tolist())  # the host read

    def next_stop(self) -> int:
        """The iteration at which the loop next stops to look: a check, an iterate to keep, or max_iter."""
        after = self.iterations + 1
        stops = [self.max_iter, after + (-after) % self.check_every]
        stops += [i for i in self._keep if i >= after]
        return min(stops)

    def _batch_active(self) -> Tensor:
        """stop_over="batch": every finite sample stays active until the residual of the batch's finite samples (one
        norm over all their values) is <= tol; failed samples stop at once."""
        finite = self.best_residual == self.best_residual
        norms = torch.linalg.vector_norm(torch.where(finite, self._norms, 0.0), dim=(1, 2))  # ||G||, ||F||
        if self.stop_mode == "rel":
            residual = (norms[0] / norms[1]).nan_to_num_(nan=0.0)  # 0/0: every finite sample at x = f(x) = 0
        else:
            residual = norms[0]
        self.batch_trace.append(residual)
        return finite & (residual > self.tol) & self.active


def iterate(solver: Solver, run: SolveRun) -> None:
    """Run ``solver`` from the run's z0 until no sample is active at a check or ``run.max_iter`` iterations were made;
    the results are in ``run`` (best iterate, residuals, trace, NFE). A capturable solver in a solve that compiles
    runs through the loop's graphs (:mod:`._graph`); every other solve runs here, eagerly."""
    if solver.capturable and run.compiler.enabled:
        (iterate_captured if run.compiler.capture else iterate_compiled)(solver, run)
        return
    loop = Loop(run)
    run.evaluate_first()
    state = solver.init(*run.current, loop)
    while not run.finished:
        step = solver.step(state, *run.current, loop)
        state = step.state
        run.advance(step.z, step.fz)
