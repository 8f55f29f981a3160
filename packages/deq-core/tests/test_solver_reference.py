"""The solvers, run by ``solve()``'s loop, against straightforward per-sample reference implementations written from
the textbook formulas (one sample at a time, full history lists, explicit least squares): the same iterates, the same
per-sample stopping, the same best iterate. Fixed-point iteration must give the same iterates exactly (the same
floating-point operations; the residual norms may round differently); Anderson agrees to the rounding of its small
ridge-regularized least-squares problems (float64)."""

from __future__ import annotations

import pytest
import torch

import deq_core
from conftest import random_contractions

BATCH, DIM, TOL, MAX_ITER = 5, 12, 1e-10, 60


def _problem():
    """Per sample f_b(z) = tanh(A_b z + x_b) with contraction factors 0.3 ... 0.9: samples stop at different
    iterations, so the loop's freezing is exercised."""
    mats = torch.stack([random_contractions(1, DIM, r)[0] for r in torch.linspace(0.3, 0.9, BATCH).tolist()])
    x = torch.randn(BATCH, DIM, dtype=torch.float64)
    return lambda z: torch.tanh(torch.einsum("bij,bj->bi", mats, z) + x), torch.zeros(BATCH, DIM, dtype=torch.float64)


def _reference(f_one, z0: torch.Tensor, propose) -> tuple[torch.Tensor, list[float]]:
    """One sample: iterate z <- propose(history) until ||f(z) - z|| / ||f(z)|| <= TOL or MAX_ITER evaluations; return
    the best iterate and the residual of every iterate (repeated once the sample has stopped, as the loop records)."""
    zs, gs, trace = [], [], []
    z = z0
    for _ in range(MAX_ITER):
        fz = f_one(z)
        zs.append(z)
        gs.append(fz - z)
        trace.append(float((fz - z).norm() / fz.norm()))
        if trace[-1] <= TOL:
            break
        z = propose(zs, gs)
    best = min(range(len(trace)), key=lambda i: trace[i])
    return zs[best], trace


def _anderson_step(m: int, beta: float, reg: float):
    def propose(zs: list[torch.Tensor], gs: list[torch.Tensor]) -> torch.Tensor:
        n = min(len(zs) - 1, m - 1)  # the last n differences
        z, g = zs[-1], gs[-1]
        if n == 0:
            return z + beta * g
        d_z = torch.stack([zs[-i] - zs[-i - 1] for i in range(1, n + 1)], dim=1)  # (D, n)
        d_g = torch.stack([gs[-i] - gs[-i - 1] for i in range(1, n + 1)], dim=1)
        gram = d_g.T @ d_g
        gamma = torch.linalg.solve(gram + reg * torch.diag(torch.diagonal(gram)), d_g.T @ g)
        return z + beta * g - (d_z + beta * d_g) @ gamma

    return propose


def _check(res: deq_core.SolverResult, f, z0: torch.Tensor, propose, exact: bool) -> None:
    for b in range(BATCH):
        z_ref, trace_ref = _reference(lambda z, b=b: f(_row(z, b, z0))[b], z0[b], propose)
        trace = res.trace[: len(trace_ref), b].tolist()
        assert int(res.iterations_per_sample[b]) == len(trace_ref), b
        if exact:  # the same iterates; the residual norms may round differently (batched vs one-row reductions)
            assert torch.equal(res.z[b], z_ref), b
            torch.testing.assert_close(torch.tensor(trace), torch.tensor(trace_ref), rtol=1e-13, atol=0)
        else:
            torch.testing.assert_close(torch.tensor(trace), torch.tensor(trace_ref), rtol=1e-6, atol=1e-14)
            torch.testing.assert_close(res.z[b], z_ref, rtol=1e-9, atol=1e-12)
        assert bool((res.trace[len(trace_ref) - 1 :, b] == res.trace[len(trace_ref) - 1, b]).all()), b  # stopped
    assert res.iterations == max(int(k) for k in res.iterations_per_sample) and res.nfe == res.iterations


def _row(z_one: torch.Tensor, b: int, like: torch.Tensor) -> torch.Tensor:
    """The batch ``like`` with row b replaced by z_one (f is per-sample, so the other rows do not matter)."""
    out = like.clone()
    out[b] = z_one
    return out


@pytest.mark.parametrize("damping", [1.0, 0.6])
def test_fixed_point_equals_the_reference_exactly(damping):
    f, z0 = _problem()
    res = deq_core.solve(f, z0, deq_core.FixedPoint(damping), max_iter=MAX_ITER, tol=TOL)
    _check(res, f, z0, lambda zs, gs: zs[-1] + gs[-1] if damping == 1.0 else torch.add(zs[-1], gs[-1], alpha=damping),
           exact=True)  # fmt: skip


@pytest.mark.parametrize(("m", "beta"), [(4, 1.0), (3, 0.7), (8, 1.0)])
def test_anderson_follows_the_reference(m, beta):
    f, z0 = _problem()
    res = deq_core.solve(f, z0, deq_core.Anderson(m=m, beta=beta), max_iter=MAX_ITER, tol=TOL)
    assert res.all_converged, res.summary()
    _check(res, f, z0, _anderson_step(m, beta, 1e-8), exact=False)
