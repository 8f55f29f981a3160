"""Bookkeeping shared by every solver: counting calls of f, per-sample residuals, the best iterate, convergence,
freezing of finished samples, non-finite values, and the residual trace.

A solver drives one :class:`SolveRun`: it evaluates its first iterate with :meth:`SolveRun.evaluate`, then loops
``while not run.finished`` proposing a new iterate, passing it through :meth:`SolveRun.freeze` (finished samples keep
their iterate) and :meth:`SolveRun.evaluate`. One call of ``evaluate`` is one iteration and one entry of the trace.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class SolveRun:
    """Per-sample state of one solve on flat (B, D) iterates.

    Args:
        fn: the map on flat tensors, (B, D) -> (B, D).
        x0: first iterate, (B, D), in the solver dtype.
        max_iter: the largest number of iterations (calls of ``evaluate``).
        tol: residual at or below which a sample has converged.
        stop_mode: "rel" (||f(z) - z|| / ||f(z)||) or "abs" (||f(z) - z||), norms over each sample's D values.
    """

    def __init__(self, fn: Callable[[Tensor], Tensor], x0: Tensor, max_iter: int, tol: float, stop_mode: str):
        self._fn = fn
        self.max_iter = max_iter
        self.tol = tol
        self.stop_mode = stop_mode
        self.nfe = 0
        self.iterations = 0
        batch = x0.shape[0]
        self.best_x = x0.clone()
        self.best_fx = x0.clone()
        self.best_residual = torch.full((batch,), float("inf"), dtype=x0.dtype, device=x0.device)
        self.converged = torch.zeros(batch, dtype=torch.bool, device=x0.device)
        self.nonfinite = torch.zeros(batch, dtype=torch.bool, device=x0.device)
        self.trace: list[Tensor] = []
        self._all_done = False
        self._all_active = True
        self._any_nonfinite = False

    def call(self, x: Tensor) -> Tensor:
        """One counted call of f, without bookkeeping (used by line searches through :meth:`evaluate`)."""
        self.nfe += 1
        return self._fn(x)

    @property
    def active(self) -> Tensor:
        """Bool (B,): samples still iterating (neither converged nor failed with a non-finite value)."""
        return ~(self.converged | self.nonfinite)

    @property
    def finished(self) -> bool:
        return self._all_done or self.iterations >= self.max_iter

    def freeze(self, x_new: Tensor, x_old: Tensor) -> Tensor:
        """``x_new`` for active samples, ``x_old`` for finished ones (torch.where: a NaN in x_new cannot leak)."""
        if self._all_active:
            return x_new
        return torch.where(self.active[:, None], x_new, x_old)

    def evaluate(self, x: Tensor, fx: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Evaluate f at x (unless ``fx`` is given, already counted), record the iteration, return (x, f(x), g).

        Samples whose x or f(x) holds a NaN or Inf are marked non-finite and frozen; in the returned tensors their
        rows are replaced by their best iterate so that no NaN enters any solver buffer. (A NaN or Inf anywhere in x or
        f(x) makes ||f(x) - x|| non-finite, so the check costs nothing beyond the residual itself.)
        """
        if fx is None:
            fx = self.call(x)
        gx = fx - x
        res = torch.linalg.vector_norm(gx, dim=1)
        bad = ~torch.isfinite(res)
        if self.stop_mode == "rel":
            f_norm = torch.linalg.vector_norm(fx, dim=1)
            bad = bad | ~torch.isfinite(f_norm)
            res = torch.where(res == 0, torch.zeros_like(res), res / f_norm)
        if bool(bad.any()):
            self.nonfinite |= bad
            self._any_nonfinite = True
            x = torch.where(bad[:, None], self.best_x, x)
            fx = torch.where(bad[:, None], self.best_fx, fx)
            gx = fx - x
        if self._any_nonfinite:
            res = torch.where(self.nonfinite, torch.full_like(res, float("inf")), res)
        better = res < self.best_residual
        all_better, any_better = torch.stack([better.all(), better.any()]).tolist()
        if all_better:  # iterates are never modified in place by the solvers: keep references, no copies
            self.best_x, self.best_fx, self.best_residual = x, fx, res
        elif any_better:
            self.best_residual = torch.where(better, res, self.best_residual)
            self.best_x = torch.where(better[:, None], x, self.best_x)
            self.best_fx = torch.where(better[:, None], fx, self.best_fx)
        self.converged = self.best_residual <= self.tol
        self.trace.append(res)
        self.iterations += 1
        active = self.active
        any_active, all_active = torch.stack([active.any(), active.all()]).tolist()
        self._all_done = not any_active
        self._all_active = all_active
        return x, fx, gx
