"""The implicit layer: ``z_star, info = DEQ(...)(f, z0)``."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ._solvers import Solver, resolve_solver
from ._solvers._options import check_int, check_number
from ._solvers.resolve import SolverLike
from ._state import (
    State,
    as_tensors,
    check_output,
    detached_leaves,
    flatten,
    rebuild,
    solver_dtype,
    state_spec,
    unflatten,
)
from .jacobian import frobenius_from_graph, vector_jacobian
from .solve import SolverResult, check_limits, solve

BACKWARDS = ("implicit", "phantom", "jfb")


@dataclass
class DEQInfo:
    """Statistics of one DEQ call. Per-sample tensors have shape (B,).

    Forward (set by the call): ``nfe`` (calls of f by the solver, or the unrolled steps), ``iterations``,
    ``residual``, ``converged``, ``nonfinite``, ``trace`` (iterations, B), ``iterations_per_sample`` (B,),
    ``mode`` ("solve" or "unrolled"),
    ``jacobian_loss`` (scalar batch mean of ||J_f(z*)||_F^2 / D when asked for, else None).

    Backward (set when the implicit backward has run; None before): ``nfe_backward``, ``residual_backward``,
    ``converged_backward``.
    """

    nfe: int
    iterations: int
    residual: Tensor
    converged: Tensor
    nonfinite: Tensor
    trace: Tensor
    mode: str
    iterations_per_sample: Tensor | None = None
    jacobian_loss: Tensor | None = None
    nfe_backward: int | None = None
    residual_backward: Tensor | None = None
    converged_backward: Tensor | None = None

    def statistics(self) -> dict[str, float]:
        """This call's statistics under their metrics.jsonl names, as floats: ``nfe_forward``, ``residual`` (batch
        mean), and once set, ``nfe_backward``, ``residual_backward`` (batch mean) and ``jacobian_loss``."""
        stats = {"nfe_forward": float(self.nfe), "residual": float(self.residual.float().mean())}
        if self.nfe_backward is not None:
            stats["nfe_backward"] = float(self.nfe_backward)
        if self.residual_backward is not None:
            stats["residual_backward"] = float(self.residual_backward.float().mean())
        if self.jacobian_loss is not None:
            stats["jacobian_loss"] = float(self.jacobian_loss.detach())
        return stats

    @classmethod
    def from_result(cls, res: SolverResult) -> DEQInfo:
        return cls(
            nfe=res.nfe,
            iterations=res.iterations,
            residual=res.residual,
            converged=res.converged,
            nonfinite=res.nonfinite,
            trace=res.trace,
            iterations_per_sample=res.iterations_per_sample,
            mode="solve",
        )


@dataclass
class _Adjoint:
    """What the implicit backward needs: the tracked call fz = f(z*) and the backward solver settings."""

    fz: tuple[Tensor, ...]
    z_star: tuple[Tensor, ...]
    info: DEQInfo
    solver: Solver
    max_iter: int
    tol: float
    stop_mode: str

    def solve(self, grads: tuple[Tensor | None, ...]) -> tuple[Tensor, ...]:
        """Solve u = u J_f(z*) + grad for u, the gradient that flows into the tracked call f(z*)."""
        spec = state_spec(tuple(self.fz), "f(z*)")
        dtype = solver_dtype(spec.dtypes)
        grad = flatten(tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, self.fz)), dtype)

        def vjp(u: Tensor) -> Tensor:
            outs = vector_jacobian(self.fz, self.z_star, as_tensors(unflatten(u, spec)))
            return flatten(outs, dtype)

        res = solve(
            lambda u: vjp(u) + grad,
            grad,
            solver=self.solver,
            max_iter=self.max_iter,
            tol=self.tol,
            stop_mode=self.stop_mode,
        )
        self.info.nfe_backward = res.nfe
        self.info.residual_backward = res.residual
        self.info.converged_backward = res.converged
        if bool(res.nonfinite.any()):
            raise FloatingPointError(
                "the implicit backward produced NaN/Inf (u = u J + grad); " + res.summary() + ". The layer is "
                "likely not contractive at z*: add Jacobian regularization, lower the learning rate, or use "
                "backward='phantom'."
            )
        u = res.z
        assert isinstance(u, Tensor)
        return as_tensors(unflatten(u, spec))


class _ImplicitGradient(torch.autograd.Function):
    """Identity on f(z*) in the forward; in the backward, replaces the incoming gradient g by the solution u of
    u = u J_f(z*) + g, which then flows through the tracked call f(z*) to f's parameters and inputs."""

    @staticmethod
    def forward(ctx: Any, adjoint: _Adjoint, *fz: Tensor) -> tuple[Tensor, ...]:
        ctx.adjoint = adjoint
        return tuple(t.clone() for t in fz)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Any, ...]:
        return (None, *ctx.adjoint.solve(grads))


class DEQ(nn.Module):
    """A deep equilibrium layer: finds z* = f(z*) and differentiates through it.

    ``z_out, info = deq(f, z0)`` returns z_out = f(z*) (one tracked call of f at the solver's best iterate z*)
    and :class:`DEQInfo`. The layer holds no parameters: f closes over the model's parameters and input injection.

    Args:
        solver, max_iter, tol, stop_mode, solver_options: the forward solve (see :func:`deq_core.solve`).
        backward: "implicit" (implicit-function-theorem gradient: the adjoint system u = u J + grad solved by
            ``backward_solver``), "phantom" (``phantom_steps`` damped steps z <- (1 - tau) z + tau f(z) from z*,
            backpropagated through, tau = ``phantom_damping``) or "jfb" (one step, f(z*), backpropagated).
        backward_solver, backward_max_iter, backward_tol, backward_stop_mode, backward_options: the adjoint solve.
        eval_max_iter, eval_tol: limits used in eval mode (``module.eval()``), e.g. a relaxed tolerance; default:
            the training ones.
        jacobian_samples: Hutchinson probes for ``jacobian_loss=True``.
        on_nonfinite: what to do when f returns NaN/Inf during the forward solve: "raise" (FloatingPointError),
            "warn" or "ignore" (the statistics in ``info.nonfinite`` always say it). With "warn" / "ignore" those
            samples are excluded from the gradient: their rows of z_out are their best finite values, detached, and
            the other samples get the gradients of the batch without them (for f whose samples do not interact).

    Memory: the solve runs without autograd; only the final call f(z*) is kept for backward, so training memory
    does not grow with the number of solver iterations. In eval mode z_out is still differentiable when autograd
    is enabled; under torch.no_grad() no extra call of f is made.
    """

    def __init__(
        self,
        solver: SolverLike = "anderson",
        max_iter: int = 30,
        tol: float = 1e-4,
        stop_mode: str = "rel",
        solver_options: Mapping[str, Any] | None = None,
        backward: str = "implicit",
        backward_solver: SolverLike = "broyden",
        backward_max_iter: int = 30,
        backward_tol: float = 1e-6,
        backward_stop_mode: str = "rel",
        backward_options: Mapping[str, Any] | None = None,
        phantom_steps: int = 5,
        phantom_damping: float = 0.5,
        eval_max_iter: int | None = None,
        eval_tol: float | None = None,
        jacobian_samples: int = 1,
        on_nonfinite: str = "raise",
    ) -> None:
        super().__init__()
        solver = resolve_solver(solver, solver_options)
        backward_solver = resolve_solver(backward_solver, backward_options)
        check_limits(max_iter, tol, stop_mode)
        check_limits(backward_max_iter, backward_tol, backward_stop_mode)
        eval_limits = (max_iter if eval_max_iter is None else eval_max_iter, tol if eval_tol is None else eval_tol)
        check_limits(*eval_limits, stop_mode)
        if backward not in BACKWARDS:
            raise ValueError(f"unknown backward {backward!r}; choose one of {list(BACKWARDS)}.")
        check_int("DEQ", "phantom_steps", phantom_steps, 1)
        if not 0.0 < check_number("DEQ", "phantom_damping", phantom_damping) <= 1.0:
            raise ValueError(f"DEQ: phantom_damping must be in (0, 1], got {phantom_damping}.")
        check_int("DEQ", "jacobian_samples", jacobian_samples, 1)
        if on_nonfinite not in ("raise", "warn", "ignore"):
            raise ValueError(f"on_nonfinite must be 'raise', 'warn' or 'ignore', got {on_nonfinite!r}.")
        self.solver, self.max_iter, self.tol, self.stop_mode = solver, max_iter, tol, stop_mode
        self.backward = backward
        self.backward_solver, self.backward_max_iter = backward_solver, backward_max_iter
        self.backward_tol, self.backward_stop_mode = backward_tol, backward_stop_mode
        self.phantom_steps, self.phantom_damping = phantom_steps, phantom_damping
        self.eval_max_iter, self.eval_tol = eval_max_iter, eval_tol
        self.jacobian_samples = jacobian_samples
        self.on_nonfinite = on_nonfinite

    def extra_repr(self) -> str:
        return (
            f"solver={self.solver!r}, max_iter={self.max_iter}, tol={self.tol:g}, stop_mode={self.stop_mode!r}, "
            f"backward={self.backward!r}, backward_solver={self.backward_solver!r}"
        )

    def forward(
        self,
        f: Callable[[State], State],
        z0: State,
        *,
        max_iter: int | None = None,
        tol: float | None = None,
        unroll: int | None = None,
        jacobian_loss: bool = False,
    ) -> tuple[State, DEQInfo]:
        """Solve and return (f(z*), info).

        Args:
            f: state -> state of the same structure.
            z0: initial state, Tensor (B, ...) or tuple/list of Tensors. When solving, no gradient flows into z0
                (z* does not depend on it).
            max_iter, tol: override the limits for this call (e.g. a random jitter of max_iter during training).
            unroll: instead of solving, apply f ``unroll`` times from z0 with ordinary backpropagation (the
                weight-tied pretraining phase of the papers); gradients also reach z0 when it requires grad (e.g. a
                learned initial state); info.residual is that of the last-but-one iterate.
            jacobian_loss: also set ``info.jacobian_loss``, the Hutchinson estimate of ||J_f(z*)||_F^2 / D computed
                from the same tracked call f(z*) (no extra call of f). Needs autograd.
        """
        if jacobian_loss and not torch.is_grad_enabled():
            raise RuntimeError("jacobian_loss=True needs autograd; call the layer outside torch.no_grad().")
        if unroll is not None:
            return self._unrolled(f, z0, unroll, jacobian_loss)
        if self.training:
            limit, tolerance = self.max_iter, self.tol
        else:
            limit, tolerance = self._eval_limits()
        res = solve(
            f,
            z0,
            solver=self.solver,
            max_iter=limit if max_iter is None else max_iter,
            tol=tolerance if tol is None else tol,
            stop_mode=self.stop_mode,
        )
        info = DEQInfo.from_result(res)
        bad = self._report_nonfinite(res)
        if not torch.is_grad_enabled():
            return res.fz, info
        with _nonfinite_rows_sanitized(bad is not None):
            out = self._tracked(f, z0, res, info, jacobian_loss, bad)
        if bad is not None:  # the samples f produced NaN/Inf for: their best finite value, no gradient through them
            out = tuple(torch.where(_rows_mask(bad, t), r.detach(), t) for t, r in zip(out, as_tensors(res.fz)))
        return rebuild(z0, out), info

    def _tracked(
        self, f: Callable[[State], State], z0: State, res: SolverResult, info: DEQInfo, jacobian_loss: bool,
        bad: Tensor | None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """The differentiable output from the solver's z*: the one tracked call f(z*) (and the phantom steps), with
        the backward strategy attached; sets ``info.jacobian_loss`` (averaged over the samples not in ``bad``)."""
        z_star = detached_leaves(res.z)
        fz = f(rebuild(z0, z_star))
        check_output(fz, state_spec(z0), f, "f(z*)")
        fz_t = as_tensors(fz)
        if jacobian_loss:
            per_sample = frobenius_from_graph(fz_t, z_star, self.jacobian_samples)
            kept = per_sample if bad is None else per_sample[~bad]
            info.jacobian_loss = kept.mean() if kept.numel() else kept.sum()  # no sample left: 0, not NaN
        if self.backward == "implicit":
            adjoint = _Adjoint(
                fz=fz_t,
                z_star=z_star,
                info=info,
                solver=self.backward_solver,
                max_iter=self.backward_max_iter,
                tol=self.backward_tol,
                stop_mode=self.backward_stop_mode,
            )
            return _ImplicitGradient.apply(adjoint, *fz_t)
        if self.backward == "jfb":
            return fz_t
        tau = self.phantom_damping  # phantom
        out = tuple((1 - tau) * z + tau * y for z, y in zip(z_star, fz_t))
        for _ in range(self.phantom_steps - 1):
            step = as_tensors(f(rebuild(z0, out)))
            out = tuple((1 - tau) * z + tau * y for z, y in zip(out, step))
        return out

    def _unrolled(
        self, f: Callable[[State], State], z0: State, steps: int, jacobian_loss: bool
    ) -> tuple[State, DEQInfo]:
        if not (isinstance(steps, int) and steps >= 1):
            raise ValueError(f"unroll must be an int >= 1, got {steps!r}.")
        spec = state_spec(z0)
        z, prev = z0, z0
        for i in range(steps):
            if jacobian_loss and i == steps - 1:  # the last step's input must be in the graph to take J there
                z = rebuild(z0, tuple(t if t.requires_grad else t.detach().requires_grad_() for t in as_tensors(z)))
            prev, z = z, f(z)
            check_output(z, spec, f)
        jac = None
        if jacobian_loss:
            jac = frobenius_from_graph(as_tensors(z), as_tensors(prev), self.jacobian_samples).mean()
        with torch.no_grad():
            dtype = solver_dtype(spec.dtypes)
            a, b = flatten(prev, dtype), flatten(z, dtype)
            diff = torch.linalg.vector_norm(b - a, dim=1)
            residual = diff if self.stop_mode == "abs" else diff / torch.linalg.vector_norm(b, dim=1)
        tol = self.tol if self.training else self._eval_limits()[1]
        info = DEQInfo(
            nfe=steps,
            iterations=steps,
            residual=residual,
            converged=residual <= tol,
            nonfinite=~torch.isfinite(residual),
            trace=residual.unsqueeze(0),
            iterations_per_sample=torch.full_like(residual, steps, dtype=torch.long),
            mode="unrolled",
            jacobian_loss=jac,
        )
        return z, info

    def _eval_limits(self) -> tuple[int, float]:
        """max_iter and tol in eval mode: eval_max_iter / eval_tol where given (not None), else the training ones."""
        limit = self.max_iter if self.eval_max_iter is None else self.eval_max_iter
        tolerance = self.tol if self.eval_tol is None else self.eval_tol
        return limit, tolerance

    def _report_nonfinite(self, res: SolverResult) -> Tensor | None:
        """Raise, warn or stay silent (``on_nonfinite``) when f produced NaN/Inf; return the (B,) mask of those
        samples, or None when there are none."""
        if not bool(res.nonfinite.any()):
            return None
        rows = res.nonfinite.nonzero().flatten().tolist()
        message = f"DEQ forward solve: f produced NaN/Inf for sample(s) {rows}; " + res.summary()
        if self.on_nonfinite == "raise":
            raise FloatingPointError(message + " (set on_nonfinite='warn' to continue without these samples)")
        if self.on_nonfinite == "warn":
            warnings.warn(
                message + ". They are excluded from the gradient: their outputs are their best finite values, "
                "detached, and give the other samples' gradients as if they were not in the batch.",
                RuntimeWarning,
                stacklevel=3,
            )
        return res.nonfinite


def _rows_mask(rows: Tensor, like: Tensor) -> Tensor:
    """(B,) bool -> (B, 1, ..., 1), broadcastable against ``like``."""
    return rows.view(-1, *([1] * (like.dim() - 1)))


def _finite_or_one(t: Tensor) -> Tensor:
    """A tensor saved for backward, with NaN/Inf entries replaced by 1 (only rows of excluded samples hold them)."""
    if not t.is_floating_point():
        return t
    with torch.no_grad():
        finite = torch.isfinite(t)
        return t if bool(finite.all()) else torch.where(finite, t, torch.ones((), dtype=t.dtype, device=t.device))


@contextlib.contextmanager
def _nonfinite_rows_sanitized(active: bool) -> Iterator[None]:
    """While active, tensors autograd saves for backward have their NaN/Inf entries replaced by 1.

    A sample for which f is NaN (e.g. a NaN in its input) makes the values f saves for backward NaN in that sample's
    rows; the gradient reaching those rows is zero (the sample is excluded), but 0 x NaN = NaN would still reach
    every parameter through the batch sums of the backward (e.g. W's gradient g^T x). With finite stand-ins the
    excluded rows contribute exactly 0, and the other rows, whose saved values are finite, are untouched. Only used
    when a sample is non-finite, so an ordinary step pays nothing.
    """
    if not active:
        yield
        return
    with torch.autograd.graph.saved_tensors_hooks(_finite_or_one, lambda t: t):
        yield
