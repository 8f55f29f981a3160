"""``capture=True``: the iterations between two host checks run as one compiled graph with f, and give what the eager
loop gives: the same checks, NFE, iterations, per-sample convergence, failures and iterations, the iterates up to
rounding; the whole solve as one graph (``check_every=max_iter``); refusals in one line.

Each distinct number of iterations between two stops is a graph of its own (seconds to compile), so the solves here
share one small problem (B = 5, D = 12, max_iter 12) and few intervals."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import deq_core
from deq_core import Anderson, Broyden, FixedPoint, Implicit

BATCH, DIM, MAX_ITER = 5, 12, 12


def _problem() -> tuple:
    """f(z) = tanh(z W^T + x), ||W||_2 = 0.9, float64; sample 3 turns NaN once its iterate leaves |z| < 0.5 (then
    frozen at its best finite iterate), so that freezing and NaN isolation run inside the graph."""
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(DIM, DIM, generator=gen, dtype=torch.float64)
    w = 0.9 * w / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(BATCH, DIM, generator=gen, dtype=torch.float64)
    x[3] *= 4
    rows = torch.arange(BATCH)[:, None] == 3

    def f(z: Tensor) -> Tensor:
        out = torch.tanh(z @ w.T + x)
        return torch.where((z.abs() > 0.5).any(dim=1, keepdim=True) & rows, torch.full_like(out, float("nan")), out)

    return f, torch.zeros(BATCH, DIM, dtype=torch.float64)


def _same_solve(captured: deq_core.SolverResult, eager: deq_core.SolverResult) -> None:
    assert (captured.nfe, captured.iterations) == (eager.nfe, eager.iterations)
    for name in ("converged", "nonfinite", "iterations_per_sample"):
        assert torch.equal(getattr(captured, name), getattr(eager, name)), name
    # The same operations, fused in another order: rounding differences (eps 2.2e-16) of a contraction with Lipschitz
    # constant 0.9 stay within a few hundred eps of the iterates (|z| <= 1) and residuals.
    torch.testing.assert_close(captured.trace, eager.trace, rtol=1e-9, atol=1e-13)
    torch.testing.assert_close(captured.z, eager.z, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("solver", "check_every"), [(FixedPoint(damping=0.8), 3), (FixedPoint(damping=0.8), MAX_ITER),
                                                     (Anderson(m=5), 3), (Anderson(m=5), MAX_ITER), (Broyden(), 3)],
                         ids=repr)  # fmt: skip
def test_captured_solve_gives_the_eager_results(solver, check_every):
    """check_every=3: graphs of 2 and 3 iterations (and 2 to reach max_iter), the solve stopping at a check where the
    eager one stops; check_every=max_iter: after the first iteration, the whole solve is one graph (not for Broyden,
    whose eleven unrolled steps take minutes to compile here)."""
    f, z0 = _problem()
    settings = dict(max_iter=MAX_ITER, tol=1e-6, stop_mode="abs", check_every=check_every)
    eager = deq_core.solve(f, z0, solver, **settings)
    captured = deq_core.solve(f, z0, solver, capture=True, **settings)
    assert bool(eager.nonfinite[3]) and eager.iterations > 3  # the problem exercises freezing, NaN and a chunk
    _same_solve(captured, eager)


def test_captured_batch_rule_and_kept_states():
    """stop_over="batch" and states_at: a stop at each kept iterate (5) besides the checks (every 4)."""
    f, z0 = _problem()
    settings = dict(max_iter=MAX_ITER, tol=1e-6, stop_mode="rel", stop_over="batch", check_every=4, states_at=(5,))
    eager = deq_core.solve(f, z0, Anderson(m=5), **settings)
    captured = deq_core.solve(f, z0, Anderson(m=5), capture=True, **settings)
    _same_solve(captured, eager)
    assert captured.states is not None and eager.states is not None
    torch.testing.assert_close(captured.states[0], eager.states[0], rtol=0, atol=1e-12)


def test_captured_forward_in_the_layer():
    """DEQ(capture=True): the forward solve captured, the implicit backward eager; the same gradients."""
    torch.manual_seed(3)
    w = (0.5 * torch.randn(DIM, DIM, dtype=torch.float64) / DIM**0.5).requires_grad_()
    x = torch.randn(BATCH, DIM, dtype=torch.float64)

    def grads(capture: bool) -> tuple[Tensor, deq_core.DEQInfo]:
        w.grad = None
        backward = Implicit(Anderson(m=5), max_iter=40, tol=1e-10)
        deq = deq_core.DEQ(Anderson(m=5), max_iter=MAX_ITER, tol=1e-10, check_every=MAX_ITER, capture=capture,
                           backward=backward, warn_unconverged="never")  # fmt: skip
        z, info = deq(lambda z: torch.tanh(z @ w.T + x), torch.zeros(BATCH, DIM, dtype=torch.float64))
        z.pow(2).sum().backward()
        assert w.grad is not None
        return w.grad.clone(), info

    (g_eager, info_eager), (g_captured, info_captured) = grads(False), grads(True)
    assert info_captured.nfe == info_eager.nfe == MAX_ITER
    torch.testing.assert_close(g_captured, g_eager, rtol=1e-9, atol=1e-12)


def test_capture_refuses_a_solver_that_is_not_capturable():
    f, z0 = _problem()
    with pytest.raises(ValueError, match=r"capture=True needs a capturable solver .*; broyden is not"):
        deq_core.solve(f, z0, Broyden(line_search=True), capture=True)  # its trials read the device
    with pytest.raises(ValueError, match=r"capture=True needs a capturable solver"):
        deq_core.DEQ(solver=Broyden(memory=6), capture=True)  # a rank reduction changes the shapes
    with pytest.raises(TypeError, match="capture must be True or False"):
        deq_core.solve(f, z0, capture="yes")


def test_capture_names_an_f_it_cannot_trace():
    """An f that reads a tensor's value on the host cannot be one graph: a one-line RuntimeError at the first chunk
    (its first call, made eagerly, works)."""
    f, z0 = _problem()

    def host_read(z: Tensor) -> Tensor:
        return f(z) * (1.0 if float(z.abs().max()) < 10 else 0.5)

    with pytest.raises(RuntimeError, match=r"capture=True: torch.compile cannot trace f or the solver's step") as info:
        deq_core.solve(host_read, z0, FixedPoint(), max_iter=MAX_ITER, capture=True, check_every=4)
    assert "\n" not in str(info.value)
