"""Anderson's mixing weights: the ridge reg diag(G) is the unit-column (Jacobi-scaled) ridge, solved without forming
the scaled system, and stays accurate when the differences are nearly parallel and of very different sizes."""

from __future__ import annotations

import pytest
import torch

from deq_core._solvers.anderson import _mixing_weights


def _scaled_reference(gram: torch.Tensor, rhs: torch.Tensor, reg: float) -> torch.Tensor:
    """Solve (S G S + reg I) y = S rhs, gamma = S y with S = diag(G)^(-1/2): the ridge on unit-norm columns."""
    inv = torch.diagonal(gram, dim1=1, dim2=2).rsqrt()
    scaled = gram * inv[:, :, None] * inv[:, None, :] + reg * torch.eye(gram.shape[1], dtype=gram.dtype)
    return torch.linalg.solve(scaled, (rhs * inv)[:, :, None])[:, :, 0] * inv


@pytest.mark.parametrize("reg", [1e-8, 1e-3])
def test_weights_equal_the_unit_column_ridge_on_ill_scaled_nearly_parallel_differences(reg: float) -> None:
    gen = torch.Generator().manual_seed(0)
    batch, n, dim = 16, 7, 2000
    common = torch.randn(batch, dim, 1, generator=gen, dtype=torch.float64)
    columns = common + 1e-3 * torch.randn(batch, dim, n, generator=gen, dtype=torch.float64)  # nearly parallel
    columns = columns * 10 ** (-6 * torch.rand(batch, 1, n, generator=gen, dtype=torch.float64))  # sizes 1e-6..1
    g = (columns @ torch.randn(batch, n, 1, generator=gen, dtype=torch.float64))[:, :, 0]
    g = g + 1e-5 * torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    gram, rhs = columns.mT @ columns, (columns.mT @ g[:, :, None])[:, :, 0]
    ours, ref = _mixing_weights(gram, rhs, reg), _scaled_reference(gram, rhs, reg)

    def residual(gamma: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(g - (columns @ gamma[:, :, None])[:, :, 0], dim=1)

    torch.testing.assert_close(residual(ours), residual(ref), rtol=1e-8, atol=0)
    if reg == 1e-3:  # a ridge large enough to make the solution well determined: the weights themselves agree
        torch.testing.assert_close(ours, ref, rtol=1e-7, atol=0)


def test_zero_difference_gets_zero_weight_and_singular_or_nonfinite_systems_fall_back_to_zero() -> None:
    gram = torch.tensor([[[2.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], [[float("nan"), 0.0], [0.0, 1.0]]])
    gram = gram.double()
    rhs = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    gamma = _mixing_weights(gram, rhs, 1e-8)
    assert torch.isfinite(gamma).all()
    assert float(gamma[0, 1]) == 0.0 and abs(float(gamma[0, 0]) - 0.5) < 1e-6  # the zero column: weight 0
    assert float((gram[1] @ gamma[1] - rhs[1]).abs().max()) < 1e-6  # rank-deficient but consistent: ridge solves it
    assert bool((gamma[2] == 0).all())  # NaN in the system: plain step
