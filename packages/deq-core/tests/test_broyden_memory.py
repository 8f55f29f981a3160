"""Limited-memory Broyden: the rank reduction applied when the update buffer is full."""

from __future__ import annotations

import pytest
import torch

import deq_core
from deq_core._solvers.broyden import _reduce_rank


@pytest.mark.parametrize("dim, memory, keep", [(30, 8, 4), (5, 8, 4), (12, 6, 1)])
def test_reduce_rank_is_the_best_low_rank_approximation(dim: int, memory: int, keep: int) -> None:
    gen = torch.Generator().manual_seed(0)
    us = torch.randn(3, memory, dim, generator=gen, dtype=torch.float64)
    vs = torch.randn(3, memory, dim, generator=gen, dtype=torch.float64)
    dense = us.transpose(1, 2) @ vs  # sum_i u_i v_i^T, (B, D, D)
    u_svd, s_svd, vh_svd = torch.linalg.svd(dense)
    kept = _reduce_rank(us, vs, keep)
    assert kept == min(keep, dim)
    best = (u_svd[:, :, :kept] * s_svd[:, None, :kept]) @ vh_svd[:, :kept]
    torch.testing.assert_close(us[:, :kept].transpose(1, 2) @ vs[:, :kept], best, rtol=1e-9, atol=1e-9)
    assert bool((us[:, kept:] == 0).all()) and bool((vs[:, kept:] == 0).all())


def test_small_memory_still_converges_on_a_non_contractive_map() -> None:
    """An affine map with spectral radius 1.3: plain iteration diverges; Broyden with 4 stored updates (reduced
    many times over the solve) still reaches the fixed point, which is checked against the exact solution."""
    gen = torch.Generator().manual_seed(1)
    dim = 24
    a = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    a = 1.3 * a / torch.linalg.eigvals(a).abs().max()
    b = torch.randn(2, dim, generator=gen, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(dim, dtype=torch.float64) - a, b.T).T
    res = deq_core.solve(
        lambda z: z @ a.T + b,
        torch.zeros(2, dim, dtype=torch.float64),
        method="broyden",
        max_iter=400,
        tol=1e-10,
        memory=4,
    )
    assert res.all_converged, res.summary()
    assert res.iterations > 8  # the buffer filled and was reduced several times
    torch.testing.assert_close(res.z, exact, rtol=1e-7, atol=1e-7)
    plain = deq_core.solve(
        lambda z: z @ a.T + b, torch.zeros(2, dim, dtype=torch.float64), method="fixed_point", max_iter=400, tol=1e-10
    )
    assert not plain.all_converged
