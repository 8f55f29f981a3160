"""``DEQInfo``: the statistics of one call of a :class:`~deq_core.DEQ` layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._solvers import FixedPoint
from ._state import State, as_tensors, flatten, solver_dtype, state_spec
from .solve import SolverResult

__all__ = ["DEQInfo"]


@dataclass(repr=False)
class DEQInfo:
    """Statistics of one DEQ call. Per-sample tensors have shape (B,).

    Attributes:
        forward: the forward solve's :class:`~deq_core.SolverResult` (in ``mode="unrolled"``: ``unroll`` plain steps
            z <- f(z), reported as a :class:`~deq_core.FixedPoint` run whose residual is that of the last step).
        mode: "solve" or "unrolled".
        backward: the implicit backward's SolverResult (the adjoint solve), set once the backward has run; None
            before, and always None with ``Phantom`` / ``JFB``.
        jacobian_loss: scalar batch mean of ||J_f(z*)||_F^2 / D when asked for, else None.
        states: with ``n_states`` / ``states_at`` (fixed-point correction, see :meth:`DEQ.forward`), the layer's
            differentiable states, first to last, the last being the output itself; else None.

    Shortcuts: ``nfe``, ``iterations``, ``residual``, ``converged``, ``nonfinite`` (forward) and ``nfe_backward``,
    ``residual_backward``, ``converged_backward`` (None until the backward has run).
    """

    forward: SolverResult
    mode: str = "solve"
    backward: SolverResult | None = None
    jacobian_loss: Tensor | None = None
    states: list[State] | None = None

    @property
    def nfe(self) -> int:
        return self.forward.nfe

    @property
    def iterations(self) -> int:
        return self.forward.iterations

    @property
    def residual(self) -> Tensor:
        return self.forward.residual

    @property
    def converged(self) -> Tensor:
        return self.forward.converged

    @property
    def nonfinite(self) -> Tensor:
        return self.forward.nonfinite

    @property
    def nfe_backward(self) -> int | None:
        return None if self.backward is None else self.backward.nfe

    @property
    def residual_backward(self) -> Tensor | None:
        return None if self.backward is None else self.backward.residual

    @property
    def converged_backward(self) -> Tensor | None:
        return None if self.backward is None else self.backward.converged

    def statistics(self) -> dict[str, float]:
        """This call's statistics under their metrics.jsonl names, as floats: ``nfe_forward``, ``residual`` (batch
        mean), ``unconverged`` (the fraction of samples the forward solve left above its tol, NaN / Inf ones included;
        not in unrolled mode, which has no tol), and once set, ``nfe_backward``, ``residual_backward`` (batch mean),
        ``unconverged_backward`` and ``jacobian_loss``."""
        stats = {"nfe_forward": float(self.nfe), "residual": float(self.residual.float().mean())}
        if self.mode == "solve":
            stats["unconverged"] = _unconverged(self.forward)
        if self.backward is not None:
            stats["nfe_backward"] = float(self.backward.nfe)
            stats["residual_backward"] = float(self.backward.residual.float().mean())
            stats["unconverged_backward"] = _unconverged(self.backward)
        if self.jacobian_loss is not None:
            stats["jacobian_loss"] = float(self.jacobian_loss.detach())
        return stats

    def summary(self) -> str:
        """One line: the forward (and, once run, backward) solve's summary and the Jacobian loss."""
        text = f"DEQ {self.mode} forward: {self.forward.summary()}"
        if self.backward is not None:
            text += f" | backward: {self.backward.summary()}"
        if self.jacobian_loss is not None:
            text += f" | jacobian_loss {float(self.jacobian_loss.detach()):.4g}"
        return text

    def __repr__(self) -> str:
        def brief(res: SolverResult) -> str:
            finite = res.residual[torch.isfinite(res.residual)]
            worst = f"{float(finite.max()):.3g}" if finite.numel() else "n/a"
            return f"{res.solver.name} nfe={res.nfe} converged={int(res.converged.sum())}/{res.converged.numel()} " \
                   f"max_residual={worst}"  # fmt: skip

        parts = [f"mode={self.mode!r}", f"forward=({brief(self.forward)})"]
        parts.append("backward=None" if self.backward is None else f"backward=({brief(self.backward)})")
        if self.jacobian_loss is not None:
            parts.append(f"jacobian_loss={float(self.jacobian_loss.detach()):.4g}")
        return f"DEQInfo({', '.join(parts)})"

    @classmethod
    def from_unrolled(
        cls, prev: State, z: State, steps: int, *, stop_mode: str = "rel", tol: float = 0.0,
        jacobian_loss: Tensor | None = None,
    ) -> DEQInfo:  # fmt: skip
        """The info of ``steps`` plain applications of f ending in ``prev`` -> ``z`` = f(prev) (no solve): the residual
        ||z - prev|| (/ ||z|| for ``stop_mode="rel"``) of ``prev`` per sample (``forward.z`` = prev, ``forward.fz`` =
        z, detached), converged where <= ``tol`` (0: only at an exact fixed point)."""
        spec = state_spec(z, "z")
        with torch.no_grad():
            dtype = solver_dtype(spec.dtypes)
            a, b = flatten(prev, dtype), flatten(z, dtype)
            diff = torch.linalg.vector_norm(b - a, dim=1)
            residual = diff if stop_mode == "abs" else diff / torch.linalg.vector_norm(b, dim=1)
        forward = SolverResult(
            z=_detached(prev), fz=_detached(z), nfe=steps, iterations=steps, residual=residual,
            converged=residual <= tol, nonfinite=~torch.isfinite(residual), trace=residual.unsqueeze(0),
            iterations_per_sample=torch.full_like(residual, steps, dtype=torch.long), solver=FixedPoint(),
            stop_mode=stop_mode, tol=float(tol), max_iter=steps,
        )  # fmt: skip
        return cls(forward=forward, mode="unrolled", jacobian_loss=jacobian_loss)


def _detached(state: State) -> State:
    tensors = tuple(t.detach() for t in as_tensors(state))
    return tensors[0] if isinstance(state, Tensor) else type(state)(tensors)


def _unconverged(res: SolverResult) -> float:
    """The fraction of a solve's samples that did not converge (0 for an empty batch)."""
    return float((~res.converged).float().mean()) if res.converged.numel() else 0.0
