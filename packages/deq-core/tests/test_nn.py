"""VariationalDropout, weight_norm and cached_weights."""

from __future__ import annotations

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
