"""The DEQ layer's gradients: implicit (against a dense implicit-function-theorem solve), gradcheck, phantom, JFB,
unrolled, chained layers, backward statistics, eval mode and no_grad."""

from __future__ import annotations

import itertools

import pytest
import torch

import deq_core
from conftest import (
    METHODS,
    Counter,
    exact_fixed_point_layer,
    flat,
    rel_err,
    scaled_to_norm,
    unflat,
)

DIM, N_IN, BATCH = 7, 4, 3  # DIM = 7 = 2*2 + 3 for the tuple state


class Cell:
    """f(z) = tanh(z W^T + x U^T + b) on flat (B, DIM) states, float64; the parameters and the input require grad."""

    def __init__(self, dim: int = DIM, n_in: int = N_IN, batch: int = BATCH, norm: float = 0.5):
        self.w = scaled_to_norm(torch.randn(dim, dim, dtype=torch.float64), norm).requires_grad_()
        self.u = torch.randn(dim, n_in, dtype=torch.float64).requires_grad_()
        self.b = (0.1 * torch.randn(dim, dtype=torch.float64)).requires_grad_()
        self.x = torch.randn(batch, n_in, dtype=torch.float64).requires_grad_()

    @property
    def leaves(self) -> list[torch.Tensor]:
        return [self.w, self.u, self.b, self.x]

    def flat_map(self, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z @ self.w.T + self.x @ self.u.T + self.b)

    def state_map(self, kind: str):
        """The same map on a tensor state (B, DIM) or a tuple state ((B, 2, 2), (B, 3))."""
        if kind == "tensor":
            return self.flat_map
        return lambda z: unflat(self.flat_map(flat(z)), z)


def zeros_state(kind: str, batch: int = BATCH):
    if kind == "tensor":
        return torch.zeros(batch, DIM, dtype=torch.float64)
    return (torch.zeros(batch, 2, 2, dtype=torch.float64), torch.zeros(batch, 3, dtype=torch.float64))


def exact_grads(cell: Cell, weights: torch.Tensor) -> list[torch.Tensor]:
    """Gradients of sum(weights * z*) by the dense implicit-function-theorem solve."""
    z_star = deq_core.solve(
        cell.flat_map, torch.zeros(weights.shape, dtype=torch.float64), tol=1e-14, max_iter=500, stop_mode="abs"
    ).z
    z_ref = exact_fixed_point_layer(cell.flat_map, z_star)
    return list(torch.autograd.grad((weights * z_ref).sum(), cell.leaves))


def tight_deq(
    backward: str = "implicit", backward_solver: str = "broyden", backward_max_iter: int = 300,
    backward_tol: float = 1e-12, phantom_steps: int = 5, phantom_damping: float = 0.5, **kwargs
) -> deq_core.DEQ:  # fmt: skip
    """A DEQ solved to tight tolerances, with the backward strategy named by ``backward`` and its settings."""
    strategy = {
        "implicit": lambda: deq_core.Implicit(backward_solver, max_iter=backward_max_iter, tol=backward_tol),
        "phantom": lambda: deq_core.Phantom(steps=phantom_steps, damping=phantom_damping),
        "jfb": deq_core.JFB,
    }[backward]()
    return deq_core.DEQ(**{"solver": "anderson", "max_iter": 200, "tol": 1e-12, "backward": strategy, **kwargs})


# --------------------------------------------------------------------------------------------------------------
# Implicit gradients
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("backward_solver", METHODS)
def test_implicit_gradient_matches_dense_ift(backward_solver, kind):
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    deq = tight_deq(backward_solver=backward_solver)

    z_out, info = deq(cell.state_map(kind), zeros_state(kind))
    assert type(z_out) is type(zeros_state(kind))
    assert info.converged.all()
    grads = torch.autograd.grad((weights * flat(z_out)).sum(), cell.leaves)

    expected = exact_grads(cell, weights)
    for name, g, e in zip(["W", "U", "b", "x"], grads, expected):
        assert rel_err(g, e) < 1e-6, name
    assert bool(info.converged_backward.all())


@pytest.mark.parametrize("backward_solver", METHODS)
def test_implicit_gradient_of_tuple_state_with_one_unused_component(backward_solver):
    """The loss reads only the second tensor of the tuple: the first gets no incoming gradient (None)."""
    cell = Cell()
    deq = tight_deq(backward_solver=backward_solver)
    z_out, _ = deq(cell.state_map("tuple"), zeros_state("tuple"))
    weights = torch.zeros(BATCH, DIM, dtype=torch.float64)
    weights[:, 4:] = torch.randn(BATCH, 3, dtype=torch.float64)
    grads = torch.autograd.grad((weights[:, 4:] * z_out[1]).sum(), cell.leaves)
    for g, e in zip(grads, exact_grads(cell, weights)):
        assert rel_err(g, e) < 1e-6


def test_gradcheck_small_deq():
    torch.manual_seed(0)
    w = scaled_to_norm(torch.randn(3, 3, dtype=torch.float64), 0.5).requires_grad_()
    x = torch.randn(2, 3, dtype=torch.float64).requires_grad_()
    deq = tight_deq(tol=1e-13, backward_tol=1e-13)

    def layer(x, w):
        z, _ = deq(lambda z: torch.tanh(z @ w.T + x), torch.zeros(2, 3, dtype=torch.float64))
        return z

    assert torch.autograd.gradcheck(layer, (x, w), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_detects_a_wrong_gradient():
    """Sanity check of the check above: the JFB gradient is not the true gradient, and gradcheck says so."""
    w = scaled_to_norm(torch.randn(3, 3, dtype=torch.float64), 0.5).requires_grad_()
    x = torch.randn(2, 3, dtype=torch.float64).requires_grad_()
    deq = tight_deq(backward="jfb", tol=1e-13)

    def layer(x, w):
        return deq(lambda z: torch.tanh(z @ w.T + x), torch.zeros(2, 3, dtype=torch.float64))[0]

    assert not torch.autograd.gradcheck(layer, (x, w), eps=1e-6, atol=1e-6, rtol=1e-5, raise_exception=False)


# --------------------------------------------------------------------------------------------------------------
# Phantom, JFB, unrolled
# --------------------------------------------------------------------------------------------------------------


def test_phantom_gradient_approaches_exact_gradient():
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    expected = exact_grads(cell, weights)
    errors = {}
    for steps in (1, 2, 5, 10, 20, 50):
        deq = tight_deq(backward="phantom", phantom_steps=steps, phantom_damping=0.5)
        counter = Counter(cell.flat_map)
        z_out, info = deq(counter, torch.zeros(BATCH, DIM, dtype=torch.float64))
        assert counter.calls == info.nfe + steps  # the phantom steps are tracked calls of f
        grads = torch.autograd.grad((weights * z_out).sum(), cell.leaves)
        errors[steps] = max(rel_err(g, e) for g, e in zip(grads, expected))
        assert info.nfe_backward is None  # no adjoint solve in phantom mode
    ks = sorted(errors)
    assert all(errors[a] > errors[b] for a, b in itertools.pairwise(ks)), errors
    assert errors[1] > 0.1
    assert errors[50] < 1e-4
    assert errors[50] < 1e-3 * errors[1]


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
def test_phantom_is_damped_steps_from_detached_z_star(kind):
    """Value and gradient equal K manual steps z <- (1 - tau) z + tau f(z) from z* (detached), backpropagated."""
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    f = cell.state_map(kind)
    deq = tight_deq(backward="phantom", phantom_steps=3, phantom_damping=0.3, tol=1e-6)
    z_out, _ = deq(f, zeros_state(kind))
    grads = torch.autograd.grad((weights * flat(z_out)).sum(), cell.leaves)

    z_star = deq_core.solve(f, zeros_state(kind), solver="anderson", max_iter=200, tol=1e-6).z
    z = flat(z_star)
    for _ in range(3):
        z = 0.7 * z + 0.3 * flat(f(unflat(z, z_star)))
    torch.testing.assert_close(flat(z_out), z, rtol=0, atol=1e-14)
    expected = torch.autograd.grad((weights * z).sum(), cell.leaves)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
def test_jfb_gradient_is_one_step_through_detached_z_star(kind):
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    f = cell.state_map(kind)
    deq = tight_deq(backward="jfb", tol=1e-8)
    counter = Counter(f)
    z_out, info = deq(counter, zeros_state(kind))
    assert counter.calls == info.nfe + 1
    grads = torch.autograd.grad((weights * flat(z_out)).sum(), cell.leaves)

    res = deq_core.solve(f, zeros_state(kind), solver="anderson", max_iter=200, tol=1e-8)
    z_star = tuple(t.detach() for t in ((res.z,) if kind == "tensor" else res.z))
    one_step = f(z_star[0] if kind == "tensor" else z_star)
    expected = torch.autograd.grad((weights * flat(one_step)).sum(), cell.leaves)
    for g, e in zip(grads, expected):
        assert torch.equal(g, e)
    # and it is not the implicit gradient
    assert max(rel_err(g, e) for g, e in zip(grads, exact_grads(cell, weights))) > 1e-2


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
def test_unrolled_equals_manual_application(kind):
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    f = cell.state_map(kind)
    z0 = zeros_state(kind)
    z_out, info = tight_deq()(f, z0, unroll=4)
    assert info.mode == "unrolled" and info.nfe == 4 and info.iterations == 4
    grads = torch.autograd.grad((weights * flat(z_out)).sum(), cell.leaves)

    prev, z = None, z0
    for _ in range(4):
        prev, z = z, f(z)
    assert torch.equal(flat(z_out), flat(z))
    expected = torch.autograd.grad((weights * flat(z)).sum(), cell.leaves)
    for g, e in zip(grads, expected):
        assert torch.equal(g, e)
    diff = (flat(z) - flat(prev)).detach().norm(dim=1)
    torch.testing.assert_close(info.residual, diff / flat(z).detach().norm(dim=1), rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------------------------------
# Several DEQ calls before one backward
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("same_module", [True, False])
def test_two_chained_deqs_one_backward(same_module):
    """z1 = DEQ(f1(., x)), z2 = DEQ(f2(., z1)); loss on z2; gradients to both layers' parameters and to x."""
    first, second = Cell(), Cell()
    v = torch.randn(DIM, DIM, dtype=torch.float64, requires_grad=True)  # how z1 enters f2
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    leaves = [first.w, first.u, first.b, first.x, second.w, second.b, v]

    def f2_given(z1):
        return lambda z: torch.tanh(z @ second.w.T + z1 @ v.T + second.b)

    deq1 = tight_deq(backward_solver="broyden")
    deq2 = deq1 if same_module else tight_deq(backward_solver="anderson")
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)
    z1, info1 = deq1(first.flat_map, z0)
    z2, info2 = deq2(f2_given(z1), z0)
    grads = torch.autograd.grad((weights * z2).sum(), leaves)
    assert info1.nfe_backward is not None and info2.nfe_backward is not None
    assert info1 is not info2

    tight = {"tol": 1e-14, "max_iter": 500, "stop_mode": "abs"}
    r1 = exact_fixed_point_layer(first.flat_map, deq_core.solve(first.flat_map, z0, **tight).z)
    f2 = f2_given(r1)
    r2 = exact_fixed_point_layer(f2, deq_core.solve(f2, z0, **tight).z)
    expected = torch.autograd.grad((weights * r2).sum(), leaves)
    for g, e in zip(grads, expected):
        assert rel_err(g, e) < 1e-6


def test_deq_applied_to_its_own_output():
    """The same layer and cell applied twice in sequence: z2 = DEQ(f(., z1)) with z1 = DEQ(f(., x))."""
    cell = Cell(n_in=DIM)
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    deq = tight_deq()
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)

    def f_of(inp):
        return lambda z: torch.tanh(z @ cell.w.T + inp @ cell.u.T + cell.b)

    z1, _ = deq(f_of(cell.x), z0)
    z2, _ = deq(f_of(z1), z0)
    grads = torch.autograd.grad((weights * z2).sum(), cell.leaves)

    tight = {"tol": 1e-14, "max_iter": 500, "stop_mode": "abs"}
    r1 = exact_fixed_point_layer(f_of(cell.x), deq_core.solve(f_of(cell.x), z0, **tight).z)
    r2 = exact_fixed_point_layer(f_of(r1), deq_core.solve(f_of(r1), z0, **tight).z)
    expected = torch.autograd.grad((weights * r2).sum(), cell.leaves)
    for g, e in zip(grads, expected):
        assert rel_err(g, e) < 1e-6


# --------------------------------------------------------------------------------------------------------------
# Statistics, eval mode, no_grad
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backward_solver", METHODS)
def test_backward_statistics_set_after_backward(backward_solver):
    cell = Cell()
    deq = tight_deq(backward_solver=backward_solver, backward_tol=1e-10)
    counter = Counter(cell.flat_map)
    z_out, info = deq(counter, torch.zeros(BATCH, DIM, dtype=torch.float64))
    assert info.nfe_backward is None and info.residual_backward is None and info.converged_backward is None
    assert info.mode == "solve"
    assert counter.calls == info.nfe + 1
    calls = counter.calls
    z_out.sum().backward()
    assert counter.calls == calls  # the adjoint solve uses vector-Jacobian products, not new calls of f
    assert isinstance(info.nfe_backward, int) and info.nfe_backward >= 2
    assert info.residual_backward.shape == (BATCH,)
    assert bool((info.residual_backward <= 1e-10).all())
    assert info.converged_backward.dtype == torch.bool and bool(info.converged_backward.all())


def test_backward_statistics_report_unconverged_adjoint():
    cell = Cell(norm=0.9)
    deq = tight_deq(backward_solver="fixed_point", backward_max_iter=3, backward_tol=1e-12)
    z_out, info = deq(cell.flat_map, torch.zeros(BATCH, DIM, dtype=torch.float64))
    z_out.sum().backward()
    assert info.nfe_backward == 3
    assert not bool(info.converged_backward.any())
    assert bool((info.residual_backward > 1e-12).all())


def test_eval_mode_is_differentiable_and_uses_eval_limits():
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)
    deq = tight_deq(backward_solver="broyden", eval_tol=1e-13, eval_max_iter=150)
    deq.eval()
    z_out, info = deq(cell.flat_map, torch.zeros(BATCH, DIM, dtype=torch.float64))
    assert z_out.requires_grad
    grads = torch.autograd.grad((weights * z_out).sum(), cell.leaves)
    for g, e in zip(grads, exact_grads(cell, weights)):
        assert rel_err(g, e) < 1e-6
    assert bool((info.residual <= 1e-13).all())


def test_eval_limits_differ_from_training_limits():
    cell = Cell(norm=0.9)
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)
    deq = deq_core.DEQ(solver="fixed_point", max_iter=100, tol=1e-10, eval_max_iter=4, eval_tol=1e-3)
    _, train_info = deq(cell.flat_map, z0)
    deq.eval()
    _, eval_info = deq(cell.flat_map, z0)
    assert eval_info.iterations <= 4 < train_info.iterations
    deq.train()
    _, again = deq(cell.flat_map, z0)
    assert again.iterations == train_info.iterations


def test_call_overrides_of_max_iter_and_tol():
    cell = Cell(norm=0.9)
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)
    deq = deq_core.DEQ(solver="fixed_point", max_iter=100, tol=1e-10)
    _, info = deq(cell.flat_map, z0, max_iter=3)
    assert info.iterations == 3
    _, info = deq(cell.flat_map, z0, tol=1e-2)
    assert bool((info.residual <= 1e-2).all()) and info.iterations < 20


@pytest.mark.parametrize("backward", ["implicit", "phantom", "jfb"])
@pytest.mark.parametrize("kind", ["tensor", "tuple"])
def test_no_grad_returns_solver_fz_without_extra_call(kind, backward):
    cell = Cell()
    f = cell.state_map(kind)
    deq = tight_deq(backward=backward, tol=1e-6)
    counter = Counter(f)
    with torch.no_grad():
        z_out, info = deq(counter, zeros_state(kind))
    assert counter.calls == info.nfe
    res = deq_core.solve(f, zeros_state(kind), solver="anderson", max_iter=200, tol=1e-6)
    for a, b in zip(flat(z_out).unbind(), flat(res.fz).unbind()):
        assert torch.equal(a, b)
    assert not flat(z_out).requires_grad


@pytest.mark.parametrize("backward", ["implicit", "jfb"])
def test_forward_value_is_f_of_best_iterate(backward):
    cell = Cell()
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64)
    z_out, info = tight_deq(backward=backward, tol=1e-6)(cell.flat_map, z0)
    res = deq_core.solve(cell.flat_map, z0, solver="anderson", max_iter=200, tol=1e-6)
    assert torch.equal(z_out.detach(), cell.flat_map(res.z).detach())
    assert torch.equal(info.residual, res.residual)
    assert info.nfe == res.nfe and info.iterations == res.iterations
    assert torch.equal(info.forward.trace, res.trace)


def test_no_gradient_flows_into_z0():
    cell = Cell()
    z0 = torch.zeros(BATCH, DIM, dtype=torch.float64, requires_grad=True)
    z_out, _ = tight_deq()(cell.flat_map, z0)
    z_out.sum().backward()
    assert z0.grad is None
    assert cell.w.grad is not None


@pytest.mark.parametrize("backward", ["implicit", "phantom", "jfb"])
def test_tuple_state_with_constant_component(backward):
    """f maps the second tensor of the state to a constant (no autograd graph): the layer, its backward and the
    Jacobian loss still work, and the implicit gradient is the exact one of the first component."""
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=torch.float64)

    def f(z):
        return cell.flat_map(z[0]), torch.zeros_like(z[1])

    z0 = (torch.zeros(BATCH, DIM, dtype=torch.float64), torch.ones(BATCH, 2, dtype=torch.float64))
    deq = tight_deq(backward=backward, phantom_steps=60)
    (z_main, z_const), info = deq(f, z0, jacobian_loss=True)
    assert torch.equal(z_const.detach(), torch.zeros(BATCH, 2, dtype=torch.float64))
    grads = torch.autograd.grad((weights * z_main).sum() + z_const.sum(), cell.leaves, retain_graph=True)
    if backward == "implicit":
        for g, e in zip(grads, exact_grads(cell, weights)):
            assert rel_err(g, e) < 1e-6
    else:
        assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)
    (jac_grad,) = torch.autograd.grad(info.jacobian_loss, [cell.w])
    assert torch.isfinite(jac_grad).all() and jac_grad.abs().sum() > 0


def test_unrolled_mode_backpropagates_into_a_learned_initial_state():
    """deq(f, z0, unroll=N) is the weight-tied network from z0: the gradient reaches z0 when it requires grad."""
    torch.manual_seed(0)
    w = 0.4 * torch.randn(4, 4, dtype=torch.float64)
    z0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    f = lambda z: torch.tanh(z @ w.T + 0.3)
    out, info = deq_core.DEQ()(f, z0, unroll=3, jacobian_loss=True)
    (grad,) = torch.autograd.grad(out.sum(), z0)
    z0_ref = z0.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad(f(f(f(z0_ref))).sum(), z0_ref)
    torch.testing.assert_close(grad, expected)
    assert info.jacobian_loss is not None and float(info.jacobian_loss) > 0
    assert info.forward.iterations_per_sample.tolist() == [3, 3]


def test_info_statistics_name_the_forward_backward_and_jacobian_numbers() -> None:
    torch.manual_seed(0)
    W = 0.4 * torch.randn(6, 6) / 6**0.5
    x = torch.randn(3, 6, requires_grad=True)
    # float32: tolerances well above its rounding floor (about 1e-7 relative), so both solves converge on any CPU
    deq = deq_core.DEQ(solver="anderson", max_iter=40, tol=1e-5, backward=deq_core.Implicit("broyden", tol=1e-5))
    z, info = deq(lambda z: torch.tanh(z @ W.T + x), torch.zeros(3, 6), jacobian_loss=True)
    stats = info.statistics()
    assert set(stats) == {"nfe_forward", "residual", "unconverged", "jacobian_loss"}
    assert stats["nfe_forward"] == info.nfe and stats["residual"] == float(info.residual.mean()) <= 1e-5
    assert stats["jacobian_loss"] == pytest.approx(float(info.jacobian_loss))
    assert stats["unconverged"] == 0.0  # every sample converged
    z.sum().backward()
    after = info.statistics()
    assert bool(info.converged_backward.all())
    assert after["nfe_backward"] == info.nfe_backward > 0
    assert after["residual_backward"] == float(info.residual_backward.mean()) <= 1e-5
    assert after["unconverged_backward"] == 0.0
