"""VariationalDropout, weight_norm, spectral_norm and cached_weights."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import deq_core
from conftest import Counter, exact_fixed_point_layer, rel_err

# --------------------------------------------------------------------------------------------------------------
# VariationalDropout
# --------------------------------------------------------------------------------------------------------------


def test_mask_is_fixed_until_reset():
    drop = deq_core.VariationalDropout(0.5)
    x = torch.randn(4, 8, 16)
    drop.reset_mask(x)
    first = drop(x)
    assert torch.equal(first, drop(x))
    assert torch.equal(drop(2 * x), 2 * first)  # the same mask on another input of the same shape
    kept = first != 0
    assert 0.3 < kept.float().mean() < 0.7
    torch.testing.assert_close(first[kept], 2.0 * x[kept])  # kept entries scaled by 1 / (1 - p)
    drop.reset_mask(x)
    assert not torch.equal(drop(x), first)  # a new mask after reset


def test_mask_stays_fixed_inside_a_deq_solve():
    drop = deq_core.VariationalDropout(0.3)
    x = torch.randn(3, 10, dtype=torch.float64)
    drop.reset_mask(x)
    masks = []

    def f(z):
        out = drop(torch.ones_like(z))
        masks.append(out)
        return 0.5 * z + out

    res = deq_core.solve(f, torch.zeros_like(x), solver="anderson", max_iter=50, tol=1e-10)
    assert res.all_converged
    assert len(masks) > 3 and all(torch.equal(m, masks[0]) for m in masks)
    torch.testing.assert_close(res.z, 2 * masks[0])


@pytest.mark.parametrize("shared_dims", [(1,), (-1,), (1, 2)])
def test_mask_shared_along_shared_dims(shared_dims):
    drop = deq_core.VariationalDropout(0.5, shared_dims=shared_dims)
    x = torch.ones(40, 5, 7)
    drop.reset_mask(x)
    expected_shape = [40, 5, 7]
    for d in shared_dims:
        expected_shape[d] = 1
    assert list(drop.mask.shape) == expected_shape
    out = drop(x)
    assert out.shape == x.shape
    for d in shared_dims:
        assert torch.equal(out, out.narrow(d, 0, 1).expand_as(out))  # constant along every shared dim
    assert len(torch.unique(out)) == 2  # some entries dropped, some kept (>= 40 draws)


def test_identity_in_eval_and_with_p_zero():
    x = torch.randn(3, 4)
    drop = deq_core.VariationalDropout(0.5).eval()
    assert drop(x) is x  # no mask needed in eval
    drop.reset_mask(x)
    assert drop.mask is None
    zero = deq_core.VariationalDropout(0.0)
    zero.reset_mask(x)
    assert torch.equal(zero(x), x)


def test_clear_error_without_mask_or_with_wrong_shape():
    drop = deq_core.VariationalDropout(0.2)
    with pytest.raises(RuntimeError, match="reset_mask"):
        drop(torch.randn(3, 4))
    drop.reset_mask(torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="does not fit"):
        drop(torch.randn(5, 7))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_dropout_probability(p):
    with pytest.raises(ValueError, match="p must be in"):
        deq_core.VariationalDropout(p)


def test_dropout_mask_gradient():
    drop = deq_core.VariationalDropout(0.5)
    x = torch.randn(4, 6, requires_grad=True)
    drop.reset_mask(x)
    drop(x).sum().backward()
    torch.testing.assert_close(x.grad, drop.mask.expand_as(x))


# --------------------------------------------------------------------------------------------------------------
# weight_norm and cached_weights
# --------------------------------------------------------------------------------------------------------------


def test_weight_norm_reparametrizes():
    lin = deq_core.weight_norm(nn.Linear(4, 3))
    g = lin.parametrizations.weight.original0
    v = lin.parametrizations.weight.original1
    assert g.shape == (3, 1) and v.shape == (3, 4)
    torch.testing.assert_close(lin.weight, g * v / v.norm(dim=1, keepdim=True))
    torch.testing.assert_close(lin.weight.norm(dim=1), g.abs().squeeze(1))  # row norms are |g|
    before = lin.weight.detach().clone()
    with torch.no_grad():
        g.mul_(2.0)
        v.mul_(3.0)  # the scale of v does not matter
    torch.testing.assert_close(lin.weight, 2 * before)


class Cell(nn.Module):
    """z -> tanh(lin(z) + x) with a weight-normalized linear layer (float64)."""

    def __init__(self, dim: int = 5):
        super().__init__()
        self.lin = deq_core.weight_norm(nn.Linear(dim, dim, bias=True).double())
        with torch.no_grad():  # contractive: ||W|| = ||g|| scale
            self.lin.parametrizations.weight.original0.mul_(0.4 / self.lin.weight.norm(dim=1, keepdim=True))

    def f(self, x):
        return lambda z: torch.tanh(self.lin(z) + x)


def _count_weight_computations(module: nn.Module) -> Counter:
    counter = Counter(lambda z: None)
    module.parametrizations.weight[0].register_forward_hook(lambda *_: counter(()))
    return counter


def test_cached_weight_is_one_tensor_inside_context():
    cell = Cell()
    assert cell.lin.weight is not cell.lin.weight  # recomputed on every access outside
    with deq_core.cached_weights(cell):
        w = cell.lin.weight
        assert cell.lin.weight is w
        assert w.requires_grad  # computed with autograd: carries gradients to g and v
    assert cell.lin.weight is not w


def test_cached_weights_computes_weight_once_per_deq_call():
    cell = Cell()
    computed = _count_weight_computations(cell.lin)
    x = torch.randn(3, 5, dtype=torch.float64)
    deq = deq_core.DEQ(solver="anderson", max_iter=100, tol=1e-10)
    with deq_core.cached_weights(cell):
        _, info = deq(cell.f(x), torch.zeros(3, 5, dtype=torch.float64))
    assert info.nfe > 3
    assert computed.calls == 1
    _, info = deq(cell.f(x), torch.zeros(3, 5, dtype=torch.float64))
    assert computed.calls == 1 + info.nfe + 1  # without the cache: once per call of f


@pytest.mark.parametrize("backward", ["implicit", "phantom"])
def test_cached_weights_give_same_results_and_gradients(backward):
    cell = Cell()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    z0 = torch.zeros(3, 5, dtype=torch.float64)
    params = [cell.lin.parametrizations.weight.original0, cell.lin.parametrizations.weight.original1, cell.lin.bias, x]
    strategy = deq_core.Phantom(steps=30) if backward == "phantom" else deq_core.Implicit(max_iter=200, tol=1e-12)
    deq = deq_core.DEQ(solver="anderson", max_iter=200, tol=1e-12, backward=strategy)

    with deq_core.cached_weights(cell):
        z_cached, _ = deq(cell.f(x), z0)
        cached_grads = torch.autograd.grad(z_cached.square().sum(), params)
    z_plain, _ = deq(cell.f(x), z0)
    plain_grads = torch.autograd.grad(z_plain.square().sum(), params)

    torch.testing.assert_close(z_cached, z_plain, rtol=0, atol=1e-14)
    for a, b in zip(cached_grads, plain_grads):
        assert torch.count_nonzero(a) > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_cached_weights_implicit_gradient_to_g_and_v_is_exact():
    cell = Cell()
    x = torch.randn(3, 5, dtype=torch.float64)
    z0 = torch.zeros(3, 5, dtype=torch.float64)
    g = cell.lin.parametrizations.weight.original0
    v = cell.lin.parametrizations.weight.original1
    deq = deq_core.DEQ(solver="broyden", max_iter=100, tol=1e-12, backward=deq_core.Implicit(max_iter=200, tol=1e-12))
    with deq_core.cached_weights(cell):
        z, _ = deq(cell.f(x), z0)
        z.sum().backward()
    assert g.grad is not None and v.grad is not None

    z_star = deq_core.solve(cell.f(x), z0, tol=1e-14, max_iter=300, stop_mode="abs").z
    expected = torch.autograd.grad(exact_fixed_point_layer(cell.f(x), z_star).sum(), [g, v])
    assert rel_err(g.grad, expected[0]) < 1e-6
    assert rel_err(v.grad, expected[1]) < 1e-6


def test_cached_weights_without_parametrizations_is_harmless():
    lin = nn.Linear(3, 3)
    with deq_core.cached_weights(lin):
        assert lin.weight is lin.weight
        out = lin(torch.ones(1, 3))
    assert out.shape == (1, 3)


# --------------------------------------------------------------------------------------------------------------
# spectral_norm
# --------------------------------------------------------------------------------------------------------------


def _with_singular_values(lin: nn.Linear, values: list[float]) -> nn.Linear:
    """``lin`` (float64) with a weight of the given singular values and random singular vectors."""
    rows, cols = lin.weight.shape
    left = torch.linalg.qr(torch.randn(rows, rows, dtype=torch.float64))[0]
    right = torch.linalg.qr(torch.randn(cols, cols, dtype=torch.float64))[0]
    diag = torch.zeros(rows, cols, dtype=torch.float64)
    diag[range(len(values)), range(len(values))] = torch.tensor(values, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(left @ diag @ right.T)
    return lin


def _top_singular_value(w: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(w.detach(), ord=2))


def test_spectral_norm_excess_shrinks_at_the_power_iteration_rate():
    """||W / sigma||_2 = sigma_1 / sigma >= 1, and its excess over 1 shrinks by (sigma_2 / sigma_1)^4 per step (one
    step per access in training mode, after the 16 at registration)."""
    ratio = 0.9  # sigma_2 / sigma_1; the other singular values are <= sigma_1 / 3: their share has died out by step 17
    lin = deq_core.spectral_norm(_with_singular_values(nn.Linear(8, 6).double(), [3.0, 3.0 * ratio, 1.0, 0.5, 0.2]))
    excess = [_top_singular_value(lin.weight) - 1.0 for _ in range(25)]
    assert min(excess) > 0.0  # the power iteration's estimate of sigma_1 never exceeds it
    measured = [b / a for a, b in zip(excess, excess[1:]) if b > 1e-10]  # above the rounding of matrix_norm
    assert len(measured) >= 20
    for rate in measured:
        assert rate == pytest.approx(ratio**4, rel=1e-2)


@pytest.mark.parametrize("n_power_iterations", [1, 4])
def test_spectral_norm_top_singular_value_is_one_after_enough_steps(n_power_iterations):
    lin = _with_singular_values(nn.Linear(8, 6).double(), [2.0, 1.0, 0.5, 0.3, 0.1])
    lin = deq_core.spectral_norm(lin, n_power_iterations=n_power_iterations)
    _ = lin.weight  # 15 + 2 n steps so far (15 + n at registration)
    # The excess is about tan^2(theta_0) (sigma_2 / sigma_1)^(4 k) = tan^2(theta_0) 2^-68 at k = 17: below 1e-12 unless
    # the random start vector is within 1e-6 rad of orthogonal to the top singular vector.
    assert _top_singular_value(lin.weight) == pytest.approx(1.0, abs=1e-12)


def test_spectral_norm_passes_n_power_iterations_and_eval_stops_them():
    three = deq_core.spectral_norm(
        _with_singular_values(nn.Linear(6, 5).double(), [1.0, 0.95, 0.9]), n_power_iterations=3
    )
    one = copy.deepcopy(three)
    one.parametrizations.weight[0].n_power_iterations = 1
    for _ in range(3):
        w_one = one.weight
    torch.testing.assert_close(three.weight, w_one, rtol=1e-14, atol=0)  # one access of 3 steps = 3 accesses of 1
    assert not torch.equal(three.weight, w_one)  # training mode: every access runs more steps
    three.eval()
    assert torch.equal(three.weight, three.weight)  # eval mode: none


def test_spectral_norm_gradient_is_that_of_w_over_sigma():
    """With the power iteration's vectors fixed (eval mode), autograd's gradient of W / (u^T W v) against finite
    differences."""
    lin = deq_core.spectral_norm(nn.Linear(5, 4).double()).eval()
    normalize = lin.parametrizations.weight[0]
    w = lin.parametrizations.weight.original.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(normalize, (w,))


def test_spectral_norm_runs_one_power_iteration_per_deq_call_with_cached_weights():
    lin = deq_core.spectral_norm(nn.Linear(5, 5, bias=False).double())
    computed = _count_weight_computations(lin)
    reference = copy.deepcopy(lin)
    x = torch.randn(3, 5, dtype=torch.float64)
    deq = deq_core.DEQ(solver="anderson", max_iter=100, tol=1e-10)
    with deq_core.cached_weights(lin):
        _, info = deq(lambda z: torch.tanh(0.5 * lin(z) + x), torch.zeros(3, 5, dtype=torch.float64))
    assert info.nfe > 3
    assert computed.calls == 1
    _ = reference.weight  # one power-iteration step
    torch.testing.assert_close(lin.parametrizations.weight[0]._u, reference.parametrizations.weight[0]._u)


def test_spectral_norm_deq_is_a_contraction_with_the_exact_implicit_gradient():
    """f(z) = tanh(c W_sn z + x) with c = 0.9 and a weight of norm 4: fixed-point iteration contracts at rate <= c
    (up to the power iteration's error), and the implicit gradient to the unnormalized weight is the exact one."""
    c, dim = 0.9, 6
    lin = deq_core.spectral_norm(_with_singular_values(nn.Linear(dim, dim, bias=False).double(), [4.0, 2.0, 1.0]))
    original = lin.parametrizations.weight.original
    x = 2.0 * torch.randn(5, dim, dtype=torch.float64)
    z0 = torch.zeros(5, dim, dtype=torch.float64)
    deq = deq_core.DEQ(
        solver="fixed_point", max_iter=400, tol=1e-10, stop_mode="abs", backward=deq_core.Implicit(tol=1e-12)
    )
    with deq_core.cached_weights(lin):
        rate = c * _top_singular_value(lin.weight)
        z, info = deq(lambda z: torch.tanh(c * lin(z) + x), z0)
        z.square().sum().backward()
    assert rate == pytest.approx(c, rel=1e-8)  # 17 steps at sigma_2 / sigma_1 = 1/2
    assert bool(info.converged.all())
    # residual of iterate k = ||z_{k+1} - z_k|| <= rate^k ||z_1 - z_0|| (plus rounding once it is tiny)
    trace = info.forward.trace
    bound = rate ** torch.arange(len(trace), dtype=torch.float64)[:, None] * trace[0] * (1 + 1e-9) + 1e-14
    assert bool((trace <= bound).all())

    lin.eval()  # the same normalized weight from now on (no more power-iteration steps)
    z_star = deq_core.solve(lambda z: torch.tanh(c * lin(z) + x), z0, tol=1e-14, max_iter=500, stop_mode="abs").z
    exact = exact_fixed_point_layer(lambda z: torch.tanh(c * lin(z) + x), z_star)
    (expected,) = torch.autograd.grad(exact.square().sum(), [original])
    assert rel_err(original.grad, expected) < 1e-8
