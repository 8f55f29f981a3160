"""deq-core: fixed-point solvers, implicit differentiation and the DEQ layer for PyTorch.

Public API::

    deq_core.solve(f, z0, solver=Anderson(m=8), max_iter=50, tol=1e-4, stop_mode="rel") -> SolverResult
    deq_core.FixedPoint(damping), Anderson(m, beta, reg), Broyden(memory, line_search, ls_steps, armijo)
    deq_core.Solver (init / step -> Step; a Loop for trial calls of f), options_of(solver)
    deq_core.resolve_solver("broyden" | "pkg.mod:Class" | Solver, options) -> Solver   # names: BUILTIN_SOLVERS
    deq_core.DEQ(solver, max_iter, tol, stop_mode, backward=Implicit(...) | Phantom(...) | JFB(), ...)(f, z0)
        -> (z_out, DEQInfo)   # info.forward / info.backward: SolverResults; info.summary()
    with deq_core.use_plan(model, deq_core.Plan(unroll, max_iter, jacobian_loss)): ...   # every DEQ layer of model
    deq_core.jacobian_frobenius(f, z, n_samples=1)   # Hutchinson ||J_f(z)||_F^2 / D, differentiable
    deq_core.spectral_radius(f, z, n_iters=20)       # rho(J_f(z)) per sample
    deq_core.weight_norm, deq_core.spectral_norm, deq_core.cached_weights, deq_core.VariationalDropout
    deq_core.saved_tensor_bytes(fn, exclude=(), batch_size=None) -> (fn(), bytes saved for backward)
    deq_core.peak_live_bytes(fn) -> (fn(), peak bytes of the storages fn creates)
"""

from ._solvers import BUILTIN_SOLVERS, Anderson, Broyden, FixedPoint, Loop, Solver, Step, options_of, resolve_solver
from .backward import JFB, Implicit, Phantom
from .info import DEQInfo
from .jacobian import frobenius_from_graph, jacobian_frobenius, spectral_radius
from .layer import DEQ
from .nn import VariationalDropout, cached_weights, spectral_norm, weight_norm
from .plan import Plan, use_plan
from .profiling import peak_live_bytes, saved_tensor_bytes
from .solve import SolverResult, solve

__version__ = "0.9.0"

__all__ = [
    "BUILTIN_SOLVERS",
    "DEQ",
    "Anderson",
    "Broyden",
    "FixedPoint",
    "Implicit",
    "JFB",
    "Loop",
    "Phantom",
    "Plan",
    "Solver",
    "Step",
    "DEQInfo",
    "SolverResult",
    "VariationalDropout",
    "cached_weights",
    "frobenius_from_graph",
    "jacobian_frobenius",
    "options_of",
    "peak_live_bytes",
    "resolve_solver",
    "saved_tensor_bytes",
    "solve",
    "spectral_norm",
    "spectral_radius",
    "use_plan",
    "weight_norm",
]
