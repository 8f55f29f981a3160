"""jacobian_frobenius (Hutchinson estimate of ||J||_F^2 / D), DEQ(jacobian_loss=True) and spectral_radius."""

from __future__ import annotations

import math

import pytest
import torch

import deq_core
from conftest import Counter, batched_jacobian, flat, rel_err, scaled_to_norm, unflat

D = 4


def tanh_map(w: torch.Tensor, b: torch.Tensor):
    return lambda z: torch.tanh(z @ w.T + b)


def exact_frobenius_tanh(w: torch.Tensor, b: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """||J||_F^2 / D of z -> tanh(z W^T + b), differentiable in W and b: J = diag(1 - tanh^2) W."""
    s = 1 - torch.tanh(z @ w.T + b) ** 2  # (B, D)
    return (s**2 * (w**2).sum(1)).sum(1) / w.shape[0]


def per_sample_linear(mats: torch.Tensor):
    """z -> A_b z per sample, on tensor or tuple states (J = A_b)."""
    return lambda z: unflat(torch.einsum("bij,bj->bi", mats, flat(z)), z)


# --------------------------------------------------------------------------------------------------------------
# jacobian_frobenius
# --------------------------------------------------------------------------------------------------------------


def test_frobenius_estimate_matches_dense_jacobian_per_sample():
    w = torch.randn(D, D, dtype=torch.float64)
    b = torch.randn(D, dtype=torch.float64)
    points = torch.randn(3, D, dtype=torch.float64)
    reps = 4000
    z = points.repeat_interleave(reps, dim=0)

    est = deq_core.jacobian_frobenius(tanh_map(w, b), z, n_samples=4, reduction="none")
    assert est.shape == (3 * reps,)
    means = est.detach().reshape(3, reps).mean(1)

    jac = batched_jacobian(tanh_map(w, b), points)
    exact = (jac**2).sum((1, 2)) / D
    torch.testing.assert_close(exact, exact_frobenius_tanh(w, b, points))  # the helper formula is right
    assert bool(((means / exact - 1).abs() < 0.05).all()), (means, exact)


def test_frobenius_n_samples_averages_probes():
    """With many probes on few samples the estimate is close; a wrong normalization by n_samples would be far off."""
    w = torch.randn(D, D, dtype=torch.float64)
    b = torch.randn(D, dtype=torch.float64)
    points = torch.randn(2, D, dtype=torch.float64)
    z = points.repeat_interleave(40, dim=0)
    est = deq_core.jacobian_frobenius(tanh_map(w, b), z, n_samples=100, reduction="none").detach()
    means = est.reshape(2, 40).mean(1)
    exact = exact_frobenius_tanh(w, b, points)
    assert bool(((means / exact - 1).abs() < 0.1).all()), (means, exact)


def test_frobenius_mean_reduction_is_batch_mean():
    w = torch.randn(D, D, dtype=torch.float64)
    z = torch.randn(5, D, dtype=torch.float64)
    f = lambda z: z @ w.T
    torch.manual_seed(7)
    per_sample = deq_core.jacobian_frobenius(f, z, n_samples=3, reduction="none")
    torch.manual_seed(7)
    mean = deq_core.jacobian_frobenius(f, z, n_samples=3)
    assert mean.shape == ()
    torch.testing.assert_close(mean, per_sample.mean())


def test_frobenius_of_linear_map_gradient():
    """f(z) = z W^T: ||J||_F^2 / D = ||W||_F^2 / D, with gradient 2 W / D; the estimate's gradient averages to it."""
    w = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    z = torch.randn(4000, 5, dtype=torch.float64)
    est = deq_core.jacobian_frobenius(lambda z: z @ w.T, z, n_samples=8)
    (grad,) = torch.autograd.grad(est, w)
    target = (w.detach() ** 2).sum() / 5
    assert abs(float(est.detach()) / float(target) - 1) < 0.05
    assert rel_err(grad, 2 * w.detach() / 5) < 0.06


def test_frobenius_gradient_matches_exact_for_tanh_map():
    w = scaled_to_norm(torch.randn(D, D, dtype=torch.float64), 1.0).requires_grad_()
    b = torch.randn(D, dtype=torch.float64, requires_grad=True)
    points = torch.randn(2, D, dtype=torch.float64)
    z = points.repeat_interleave(4000, dim=0)
    est = deq_core.jacobian_frobenius(tanh_map(w, b), z, n_samples=4)
    grads = torch.autograd.grad(est, [w, b])
    exact = exact_frobenius_tanh(w, b, points).mean()
    expected = torch.autograd.grad(exact, [w, b])
    for g, e in zip(grads, expected):
        assert torch.isfinite(g).all()
        assert rel_err(g, e) < 0.08


def test_frobenius_tuple_state():
    mats = torch.randn(2, 7, 7, dtype=torch.float64)
    z = (torch.randn(2, 2, 2, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64))
    zs = tuple(t.repeat_interleave(3000, dim=0) for t in z)
    big = mats.repeat_interleave(3000, dim=0)
    est = deq_core.jacobian_frobenius(per_sample_linear(big), zs, n_samples=2, reduction="none").detach()
    assert est.shape == (6000,) and est.dtype == torch.float64
    means = est.reshape(2, 3000).mean(1)
    exact = (mats**2).sum((1, 2)) / 7
    assert bool(((means / exact - 1).abs() < 0.05).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("with_param", [True, False])
def test_frobenius_of_map_independent_of_z_is_zero(with_param, dtype):
    """J = 0 when f ignores z, whether f's output carries a graph (through a parameter) or none at all."""
    p = torch.tensor(2.0, dtype=dtype, requires_grad=with_param)
    z = torch.randn(3, 4, dtype=dtype)
    est = deq_core.jacobian_frobenius(lambda z: torch.ones_like(z) * p, z, reduction="none")
    assert est.dtype == dtype
    assert torch.equal(est, torch.zeros(3, dtype=dtype))


def test_frobenius_tuple_state_with_constant_component():
    """A tuple state whose second component f maps to a constant (no graph): only the first contributes."""
    mats = torch.randn(1, 3, 3, dtype=torch.float64)
    z = (torch.randn(3000, 3, dtype=torch.float64), torch.randn(3000, 2, dtype=torch.float64))

    def f(z):
        return (torch.einsum("bij,bj->bi", mats.expand(3000, 3, 3), z[0]), torch.zeros_like(z[1]))

    est = deq_core.jacobian_frobenius(f, z, n_samples=2)
    exact = (mats**2).sum() / 5
    assert abs(float(est) / float(exact) - 1) < 0.05


def test_frobenius_calls_f_once_and_needs_autograd():
    counter = Counter(torch.tanh)
    deq_core.jacobian_frobenius(counter, torch.randn(3, 4), n_samples=5)
    assert counter.calls == 1
    with torch.no_grad(), pytest.raises(RuntimeError, match="autograd"):
        deq_core.jacobian_frobenius(torch.tanh, torch.randn(3, 4))
    with pytest.raises(ValueError, match="reduction"):
        deq_core.jacobian_frobenius(torch.tanh, torch.randn(3, 4), reduction="sum")
    with pytest.raises(ValueError, match="n_samples"):
        deq_core.jacobian_frobenius(torch.tanh, torch.randn(3, 4), n_samples=0)


# --------------------------------------------------------------------------------------------------------------
# DEQ(jacobian_loss=True)
# --------------------------------------------------------------------------------------------------------------


def test_deq_jacobian_loss_uses_no_extra_call():
    w = scaled_to_norm(torch.randn(D, D, dtype=torch.float64), 0.6).requires_grad_()
    b = torch.randn(D, dtype=torch.float64)
    counter = Counter(tanh_map(w, b))
    deq = deq_core.DEQ(solver="anderson", max_iter=100, tol=1e-10, jacobian_samples=2)
    z_out, info = deq(counter, torch.zeros(2000, D, dtype=torch.float64), jacobian_loss=True)
    assert counter.calls == info.nfe + 1
    assert info.jacobian_loss is not None and info.jacobian_loss.shape == ()
    assert info.jacobian_loss.requires_grad
    # value: the batch mean of ||J_f(z*)||_F^2 / D at the fixed point (all samples share it here)
    z_star = deq_core.solve(tanh_map(w, b), torch.zeros(1, D, dtype=torch.float64), tol=1e-12).z
    exact = exact_frobenius_tanh(w.detach(), b, z_star)[0]
    assert abs(float(info.jacobian_loss.detach()) / float(exact) - 1) < 0.05
    # the loss is differentiable together with the output
    (z_out.sum() + info.jacobian_loss).backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
    assert counter.calls == info.nfe + 1


def test_deq_without_jacobian_loss_leaves_it_none():
    _, info = deq_core.DEQ()(torch.cos, torch.zeros(2, 3))
    assert info.jacobian_loss is None


def test_deq_jacobian_loss_needs_autograd():
    with torch.no_grad(), pytest.raises(RuntimeError, match="autograd"):
        deq_core.DEQ()(torch.cos, torch.zeros(2, 3), jacobian_loss=True)


def test_unrolled_jacobian_loss_at_last_step():
    """In unrolled mode, the Jacobian term is taken at the input of the last step, for a linear map ||W||_F^2 / D."""
    w = torch.randn(D, D, dtype=torch.float64, requires_grad=True)
    counter = Counter(lambda z: 0.3 * z @ w.T)
    _, info = deq_core.DEQ(jacobian_samples=8)(
        counter, torch.randn(3000, D, dtype=torch.float64), unroll=3, jacobian_loss=True
    )
    assert counter.calls == 3
    target = 0.09 * (w.detach() ** 2).sum() / D
    assert abs(float(info.jacobian_loss.detach()) / float(target) - 1) < 0.05
    info.jacobian_loss.backward()
    assert w.grad is not None


# --------------------------------------------------------------------------------------------------------------
# spectral_radius
# --------------------------------------------------------------------------------------------------------------


def _rho(mats: torch.Tensor) -> torch.Tensor:
    return torch.linalg.eigvals(mats).abs().max(dim=1).values


def _complex_dominant(batch: int, dim: int, modulus: float = 2.0, angle: float = 0.7) -> torch.Tensor:
    """Non-normal matrices P diag(R, small reals) P^{-1} with R a rotation-scaling block: dominant pair
    modulus * exp(+-i angle), where the plain power method does not converge."""
    block = torch.zeros(dim, dim, dtype=torch.float64)
    c, s = math.cos(angle), math.sin(angle)
    block[:2, :2] = modulus * torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    block[2:, 2:] = torch.diag(torch.linspace(-0.9, 1.2, dim - 2, dtype=torch.float64))
    p = torch.randn(batch, dim, dim, dtype=torch.float64) + 3 * torch.eye(dim, dtype=torch.float64)
    return p @ block @ torch.linalg.inv(p)


def _symmetric(batch: int, dim: int) -> torch.Tensor:
    a = torch.randn(batch, dim, dim, dtype=torch.float64)
    return a + a.transpose(1, 2)


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("family", ["random", "complex_dominant", "symmetric"])
def test_spectral_radius_exact_with_full_krylov_space(family, kind):
    batch, dim = 3, 7
    mats = {
        "random": lambda: torch.randn(batch, dim, dim, dtype=torch.float64),
        "complex_dominant": lambda: _complex_dominant(batch, dim),
        "symmetric": lambda: _symmetric(batch, dim),
    }[family]()
    z = torch.zeros(batch, dim, dtype=torch.float64)
    if kind == "tuple":
        z = (torch.zeros(batch, 2, 2, dtype=torch.float64), torch.zeros(batch, 3, dtype=torch.float64))
    rho = deq_core.spectral_radius(per_sample_linear(mats), z, n_iters=dim, seed=0)
    assert rho.shape == (batch,) and rho.dtype == torch.float64
    torch.testing.assert_close(rho, _rho(mats), rtol=1e-6, atol=0)
    if family == "complex_dominant":
        torch.testing.assert_close(rho, torch.full((batch,), 2.0, dtype=torch.float64), rtol=1e-6, atol=0)
    # more iterations than the dimension: same answer
    again = deq_core.spectral_radius(per_sample_linear(mats), z, n_iters=3 * dim, seed=1)
    torch.testing.assert_close(again, _rho(mats), rtol=1e-6, atol=0)


def test_spectral_radius_of_nonlinear_map_at_a_point():
    w = torch.randn(5, 5, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    z = torch.randn(4, 5, dtype=torch.float64)
    counter = Counter(tanh_map(w, b))
    rho = deq_core.spectral_radius(counter, z, n_iters=5)
    assert counter.calls == 1
    torch.testing.assert_close(rho, _rho(batched_jacobian(tanh_map(w, b), z)), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("normal", [True, False])
def test_spectral_radius_with_fewer_iterations_than_dim(normal):
    """A well-separated dominant eigenvalue (3 vs others in [-1, 1]) is found with n_iters << D."""
    batch, dim = 2, 40
    eig = torch.cat([torch.tensor([3.0]), 2 * torch.rand(dim - 1) - 1]).double()
    if normal:
        q, _ = torch.linalg.qr(torch.randn(batch, dim, dim, dtype=torch.float64))
        mats = q @ torch.diag(eig) @ q.transpose(1, 2)
    else:
        p = torch.randn(batch, dim, dim, dtype=torch.float64)
        mats = p @ torch.diag(eig) @ torch.linalg.inv(p)
    z = torch.zeros(batch, dim, dtype=torch.float64)
    rho = deq_core.spectral_radius(per_sample_linear(mats), z, n_iters=10, seed=0)
    torch.testing.assert_close(rho, torch.full((batch,), 3.0, dtype=torch.float64), rtol=1e-3, atol=0)


def test_spectral_radius_float32_no_grad_and_seed():
    mats = torch.randn(3, 6, 6)
    f = per_sample_linear(mats)
    z = torch.zeros(3, 6)
    with torch.no_grad():
        rho = deq_core.spectral_radius(f, z, n_iters=6, seed=3)
    assert rho.dtype == torch.float32 and not rho.requires_grad
    torch.testing.assert_close(rho, _rho(mats.double()).float(), rtol=1e-4, atol=0)
    assert torch.equal(rho, deq_core.spectral_radius(f, z, n_iters=6, seed=3))
    with pytest.raises(ValueError, match="n_iters"):
        deq_core.spectral_radius(f, z, n_iters=0)


@pytest.mark.parametrize("with_param", [True, False])
def test_spectral_radius_of_map_independent_of_z_is_zero(with_param):
    p = torch.tensor(2.0, dtype=torch.float64, requires_grad=with_param)
    f = lambda z: torch.ones_like(z) * p
    rho = deq_core.spectral_radius(f, torch.randn(2, 3, dtype=torch.float64), n_iters=3)
    assert torch.equal(rho, torch.zeros(2, dtype=torch.float64))


def test_spectral_radius_tuple_state_with_constant_component():
    mats = _symmetric(2, 3)

    def f(z):
        return (torch.einsum("bij,bj->bi", mats, z[0]), torch.zeros_like(z[1]))

    z = (torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))
    rho = deq_core.spectral_radius(f, z, n_iters=5)
    torch.testing.assert_close(rho, _rho(mats), rtol=1e-6, atol=0)
