"""How a :class:`~deq_core.DEQ` differentiates through its fixed point: :class:`Implicit`, :class:`Phantom` or
:class:`JFB`.

Each strategy turns the one tracked call f(z*) (at the solver's detached z*) into the layer's differentiable output.
Shapes: a state is a tensor (B, ...) or a tuple of them (batch first); gradients have the state's shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ._solvers import Broyden, Solver, resolve_solver
from ._solvers._options import check_int, check_number
from ._solvers.resolve import SolverLike
from ._state import State, as_tensors, flatten, rebuild, solver_dtype, state_spec, unflatten
from .jacobian import vector_jacobian
from .solve import SolverResult, check_interval, check_limits, solve

if TYPE_CHECKING:
    from .info import DEQInfo

__all__ = ["JFB", "Implicit", "Phantom"]

_ADJOINT_SOLVER = Broyden()  # Implicit's default: every update of the solve kept


@dataclass(frozen=True)
class Implicit:
    """Implicit-function-theorem gradient (the default): the gradient g reaching the output f(z*) is replaced by the
    solution u of the adjoint system u = u J_f(z*) + g (a fixed-point problem of the state's shapes, solved with
    vector-Jacobian products of the tracked call, no extra call of f), which then flows through f(z*) to f's
    parameters and inputs. Memory: the graph of the one call f(z*), whatever the number of solver iterations.

    Args:
        solver: the adjoint solver: a :class:`~deq_core.Solver` or a name (shorthand or import path).
        max_iter, tol, stop_mode, stop_over, check_every: its limits, stopping rule and host-check interval (see
            :func:`deq_core.solve`); the result lands in ``info.backward``.
    """

    solver: Solver = _ADJOINT_SOLVER
    max_iter: int = 30
    tol: float = 1e-6
    stop_mode: str = "rel"
    stop_over: str = "sample"
    check_every: int | None = None

    def __init__(
        self,
        solver: SolverLike = _ADJOINT_SOLVER,
        max_iter: int = 30,
        tol: float = 1e-6,
        stop_mode: str = "rel",
        stop_over: str = "sample",
        check_every: int | None = None,
    ) -> None:
        object.__setattr__(self, "solver", resolve_solver(solver))
        object.__setattr__(self, "max_iter", max_iter)
        object.__setattr__(self, "tol", tol)
        object.__setattr__(self, "stop_mode", stop_mode)
        object.__setattr__(self, "stop_over", stop_over)
        object.__setattr__(self, "check_every", check_interval(check_every))
        check_limits(max_iter, tol, stop_mode, stop_over)

    def _output(self, f: Callable[[State], State], z0: State, z_star: tuple[Tensor, ...], fz: tuple[Tensor, ...],
                info: DEQInfo, report: Callable[[SolverResult, str], None], compile_step: bool = False,
                ) -> tuple[Tensor, ...]:  # fmt: skip
        return _ImplicitGradient.apply(_Adjoint(self, fz, z_star, info, report, compile_step), *fz)


@dataclass(frozen=True)
class Phantom:
    """Phantom gradient: ``steps`` damped steps z <- (1 - damping) z + damping f(z) from z* (the first uses the
    tracked f(z*)), backpropagated through as an ordinary graph: ``steps`` calls of f in memory.

    Args:
        steps: the number of steps, >= 1.
        damping: the step size tau in (0, 1].
    """

    steps: int = 5
    damping: float = 0.5

    def __post_init__(self) -> None:
        check_int("Phantom", "steps", self.steps, 1)
        if not 0.0 < check_number("Phantom", "damping", self.damping) <= 1.0:
            raise ValueError(f"Phantom: damping must be in (0, 1], got {self.damping}.")

    def _output(self, f: Callable[[State], State], z0: State, z_star: tuple[Tensor, ...], fz: tuple[Tensor, ...],
                info: DEQInfo, report: Callable[[SolverResult, str], None], compile_step: bool = False,
                ) -> tuple[Tensor, ...]:  # fmt: skip
        tau = self.damping
        out = tuple((1 - tau) * z + tau * y for z, y in zip(z_star, fz))
        for _ in range(self.steps - 1):
            step = as_tensors(f(rebuild(z0, out)))
            out = tuple((1 - tau) * z + tau * y for z, y in zip(out, step))
        return out


@dataclass(frozen=True)
class JFB:
    """Jacobian-free backpropagation: the output f(z*) is backpropagated through that one call only (J_f(z*) taken
    as 0 in the adjoint system), the cheapest gradient."""

    def _output(self, f: Callable[[State], State], z0: State, z_star: tuple[Tensor, ...], fz: tuple[Tensor, ...],
                info: DEQInfo, report: Callable[[SolverResult, str], None], compile_step: bool = False,
                ) -> tuple[Tensor, ...]:  # fmt: skip
        return fz


Backward = Implicit | Phantom | JFB
_SHORTHANDS: dict[str, Callable[[], Backward]] = {"implicit": Implicit, "phantom": Phantom, "jfb": JFB}


def resolve_backward(backward: Backward | str) -> Backward:
    """A backward strategy from an object or its shorthand ("implicit", "phantom", "jfb": the defaults)."""
    if isinstance(backward, (Implicit, Phantom, JFB)):
        return backward
    if isinstance(backward, str) and backward in _SHORTHANDS:
        return _SHORTHANDS[backward]()
    raise ValueError(
        f"unknown backward {backward!r}; choose Implicit(...), Phantom(...), JFB() or one of {list(_SHORTHANDS)}."
    )


class _Adjoint:
    """What the implicit backward needs: the strategy, the tracked call fz = f(z*) at z*, the info to fill in, the
    layer's report of an unconverged solve and whether the solve compiles its step (the layer's ``compile_step``)."""

    def __init__(self, strategy: Implicit, fz: tuple[Tensor, ...], z_star: tuple[Tensor, ...], info: DEQInfo,
                 report: Callable[[SolverResult, str], None], compile_step: bool = False) -> None:  # fmt: skip
        self.strategy, self.fz, self.z_star, self.info, self.report = strategy, fz, z_star, info, report
        self.compile_step = compile_step

    def solve(self, grads: tuple[Tensor | None, ...]) -> tuple[Tensor, ...]:
        """Solve u = u J_f(z*) + grad for u, the gradient that flows into the tracked call f(z*)."""
        spec = state_spec(tuple(self.fz), "f(z*)")
        dtype = solver_dtype(spec.dtypes)
        grad = flatten(tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, self.fz)), dtype)

        def vjp(u: Tensor) -> Tensor:
            outs = vector_jacobian(self.fz, self.z_star, as_tensors(unflatten(u, spec)))
            return flatten(outs, dtype)

        s = self.strategy
        res = solve(lambda u: vjp(u) + grad, grad, s.solver, max_iter=s.max_iter, tol=s.tol, stop_mode=s.stop_mode,
                    stop_over=s.stop_over, check_every=s.check_every, compile_step=self.compile_step)  # fmt: skip
        self.info.backward = res
        if bool(res.nonfinite.any()):
            raise FloatingPointError(
                "the implicit backward produced NaN/Inf (u = u J + grad); " + res.summary() + ". The layer is "
                "likely not contractive at z*: add Jacobian regularization, lower the learning rate, or use "
                "backward=Phantom()."
            )
        self.report(res, "backward")
        u = res.z
        assert isinstance(u, Tensor)
        return as_tensors(unflatten(u, spec))


class _ImplicitGradient(torch.autograd.Function):
    """Identity on f(z*) in the forward; in the backward, replaces the incoming gradient g by the solution u of
    u = u J_f(z*) + g, which then flows through the tracked call f(z*) to f's parameters and inputs."""

    @staticmethod
    def forward(ctx: Any, adjoint: _Adjoint, *fz: Tensor) -> tuple[Tensor, ...]:
        ctx.adjoint = adjoint
        return tuple(t.view_as(t) for t in fz)  # a view: no copy of f(z*), whose graph the adjoint keeps anyway

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Any, ...]:
        return (None, *ctx.adjoint.solve(grads))
