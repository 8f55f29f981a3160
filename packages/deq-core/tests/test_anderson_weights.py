"""Anderson's mixing weights: the ridge reg diag(G) is the unit-column (Jacobi-scaled) ridge, solved without forming
the scaled system, and stays accurate when the differences are nearly parallel and of very different sizes."""

from __future__ import annotations

import pytest
import torch

from deq_core._solvers.anderson import _mixing_weights


def _scaled_system(gram: torch.Tensor, reg: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(S G S + reg I, S) with S = diag(G)^(-1/2): the ridge system on unit-norm columns, and the scaling."""
    inv = torch.diagonal(gram, dim1=1, dim2=2).rsqrt()
    return gram * inv[:, :, None] * inv[:, None, :] + reg * torch.eye(gram.shape[1], dtype=gram.dtype), inv


def _scaled_reference(gram: torch.Tensor, rhs: torch.Tensor, reg: float) -> torch.Tensor:
    """Solve (S G S + reg I) y = S rhs, gamma = S y: the ridge on unit-norm columns, formed explicitly."""
    scaled, inv = _scaled_system(gram, reg)
    return torch.linalg.solve(scaled, (rhs * inv)[:, :, None])[:, :, 0] * inv


@pytest.mark.parametrize("reg", [1e-8, 1e-3])
def test_weights_equal_the_unit_column_ridge_on_ill_scaled_nearly_parallel_differences(reg: float) -> None:
    """The two computations differ only in rounding, so they agree to the rounding error of the system they solve:
    relative error <= c kappa eps in the scaled weights, kappa the condition number of the unit-column system (about
    1 / reg here) and c = 16 n a safety factor for the n x n solve; the least-squares residual then differs by at most
    c kappa eps ||g|| (unit columns). The tolerance follows the problem, not one CPU's rounding (CPUs differ: an AMD
    EPYC measured 2.4e-8 relative residual difference at reg 1e-8, against a bound of 1e-8 hard-coded before). A ridge
    of another form (absolute reg I, twice reg, none) misses these bounds by a factor > 200."""
    gen = torch.Generator().manual_seed(0)
    batch, n, dim = 16, 7, 2000
    common = torch.randn(batch, dim, 1, generator=gen, dtype=torch.float64)
    columns = common + 1e-3 * torch.randn(batch, dim, n, generator=gen, dtype=torch.float64)  # nearly parallel
    columns = columns * 10 ** (-6 * torch.rand(batch, 1, n, generator=gen, dtype=torch.float64))  # sizes 1e-6..1
    g = (columns @ torch.randn(batch, n, 1, generator=gen, dtype=torch.float64))[:, :, 0]
    g = g + 1e-5 * torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    gram, rhs = columns.mT @ columns, (columns.mT @ g[:, :, None])[:, :, 0]
    ours, ref = _mixing_weights(gram, rhs, reg), _scaled_reference(gram, rhs, reg)
    scaled, inv = _scaled_system(gram, reg)
    bound = 16 * n * torch.linalg.cond(scaled) * torch.finfo(torch.float64).eps  # (B,) relative error bound

    def residual(gamma: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(g - (columns @ gamma[:, :, None])[:, :, 0], dim=1)

    difference = (residual(ours) - residual(ref)).abs()
    assert bool((difference <= bound * torch.linalg.vector_norm(g, dim=1)).all()), (difference, bound)
    if reg == 1e-3:  # a ridge large enough to make the solution well determined: the weights themselves agree
        scaled_error = torch.linalg.vector_norm((ours - ref) / inv, dim=1) / torch.linalg.vector_norm(ref / inv, dim=1)
        assert bool((scaled_error <= bound).all()), (scaled_error, bound)


def test_zero_difference_gets_zero_weight_and_singular_or_nonfinite_systems_fall_back_to_zero() -> None:
    gram = torch.tensor([[[2.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], [[float("nan"), 0.0], [0.0, 1.0]]])
    gram = gram.double()
    rhs = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    gamma = _mixing_weights(gram, rhs, 1e-8)
    assert torch.isfinite(gamma).all()
    assert float(gamma[0, 1]) == 0.0 and abs(float(gamma[0, 0]) - 0.5) < 1e-6  # the zero column: weight 0
    assert float((gram[1] @ gamma[1] - rhs[1]).abs().max()) < 1e-6  # rank-deficient but consistent: ridge solves it
    assert bool((gamma[2] == 0).all())  # NaN in the system: plain step
