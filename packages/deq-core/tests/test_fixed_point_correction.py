"""Fixed-point correction: ``deq(f, z0, n_states=K)`` / ``states_at=...`` return states of the solve in
``info.states``, and ``solve(..., states_at=...)`` keeps the best iterates they come from. Values against separate
solves stopped at each iteration, gradients against direct computations (float64): the output's against the dense
implicit-function-theorem gradient, the other states' against one step (or Phantom's steps) from their iterate."""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import pytest
import torch

import deq_core
from conftest import METHODS, Counter, exact_fixed_point_layer, flat, rel_err, scaled_to_norm, unflat
from deq_core._trajectory import sampled_iterations

DIM, N_IN, BATCH = 7, 4, 3
F64 = torch.float64


class Cell:
    """f(z) = tanh(z W^T + x U^T + b), float64, on (B, DIM) states or a tuple ((B, 2, 2), (B, 3)) of them."""

    def __init__(self, norm: float = 0.8, batch: int = BATCH):
        self.w = scaled_to_norm(torch.randn(DIM, DIM, dtype=F64), norm).requires_grad_()
        self.u = torch.randn(DIM, N_IN, dtype=F64).requires_grad_()
        self.b = (0.1 * torch.randn(DIM, dtype=F64)).requires_grad_()
        self.x = torch.randn(batch, N_IN, dtype=F64).requires_grad_()

    @property
    def leaves(self) -> list[torch.Tensor]:
        return [self.w, self.u, self.b, self.x]

    def flat_map(self, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z @ self.w.T + self.x @ self.u.T + self.b)

    def state_map(self, kind: str):
        if kind == "tensor":
            return self.flat_map
        return lambda z: unflat(self.flat_map(flat(z)), z)


def zeros(kind: str, batch: int = BATCH):
    if kind == "tensor":
        return torch.zeros(batch, DIM, dtype=F64)
    return (torch.zeros(batch, 2, 2, dtype=F64), torch.zeros(batch, 3, dtype=F64))


def best_iterate(f, z0, solver, iterations: int, tol: float):
    """The best iterate after ``iterations`` iterations: a separate solve stopped there."""
    return deq_core.solve(f, z0, solver=solver, max_iter=iterations, tol=tol).z


# --------------------------------------------------------------------------------------------------------------
# Which iterations
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "n_states", "expected"),
    [(30, 4, (9, 16, 23)), (40, 4, (10, 20, 30)), (7, 3, (3, 5)), (5, 5, (1, 2, 3, 4)), (12, 1, ()), (3, 2, (2,))],
)
def test_n_states_are_spaced_as_torchdeq_spaces_them(limit, n_states, expected):
    """i_k = limit - (K - k) (limit // K): the last is the output (at limit), the others returned here."""
    assert sampled_iterations(limit, n_states, None) == expected
    assert sampled_iterations(limit, None, None) is None
    assert sampled_iterations(limit, None, [2, 3]) == (2, 3)


def test_n_states_spacing_matches_torchdeq_when_installed():
    core = pytest.importorskip("torchdeq.core")
    for limit in (5, 12, 30, 37):
        for k in range(2, 6):
            peer = core.DEQIndexing(n_states=k, f_max_iter=limit)._compute_f_iter(limit)
            assert (*sampled_iterations(limit, k, None), limit) == tuple(peer)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (dict(n_states=0), ValueError, "n_states must be an int >= 1"),
        (dict(n_states=2.0), TypeError, "n_states must be an int"),
        (dict(n_states=31), ValueError, "n_states=31 is more than the 30 iterations"),
        (dict(n_states=2, states_at=[3]), ValueError, "not both"),
        (dict(states_at=[3, 3]), ValueError, "strictly increasing"),
        (dict(states_at=[0, 3]), ValueError, "in 1..max_iter=30"),
        (dict(states_at=[31]), ValueError, "in 1..max_iter=30"),
        (dict(states_at=5), TypeError, "states_at must be"),
        (dict(unroll=3, n_states=4), ValueError, "more than the 3 iterations"),
    ],
)
def test_bad_state_arguments_raise(call, error, match):
    deq = deq_core.DEQ(max_iter=30)
    with pytest.raises(error, match=match):
        deq(torch.cos, torch.zeros(2, 3), **call)


# --------------------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("solver", METHODS)
def test_states_are_f_at_the_best_iterate_after_each_iteration(solver, kind):
    cell = Cell(norm=0.95)
    f = cell.state_map(kind)
    counter = Counter(f)
    deq = deq_core.DEQ(solver=solver, max_iter=30, tol=1e-10, backward=deq_core.JFB())
    z, info = deq(counter, zeros(kind), n_states=4)
    assert len(info.states) == 4 and info.states[-1] is z
    assert counter.calls == info.nfe + 4  # one tracked call of f per state
    for state, i in zip(info.states, (9, 16, 23, 30)):
        expected = f(best_iterate(f, zeros(kind), solver, min(i, 30), 1e-10))
        assert type(state) is type(z)
        torch.testing.assert_close(flat(state), flat(expected), rtol=0, atol=1e-12)


def test_states_at_gives_those_iterations_and_the_output():
    cell = Cell()
    z, info = deq_core.DEQ(max_iter=30, tol=1e-10)(cell.flat_map, zeros("tensor"), states_at=[2, 5])
    assert len(info.states) == 3 and info.states[-1] is z
    for state, i in zip(info.states, (2, 5)):
        expected = cell.flat_map(best_iterate(cell.flat_map, zeros("tensor"), "anderson", i, 1e-10))
        torch.testing.assert_close(state, expected, rtol=0, atol=1e-13)


def test_states_past_the_stop_stand_at_the_fixed_point_per_sample():
    """z -> a_b z + 1 with a = (0.1, 0.8): sample 0 converges in a few iterations, sample 1 in about 60 of 100, so
    states 75 and 100 of both and every state of sample 0 are at the fixed point, and sample 0's states are those
    it has alone."""
    a = torch.tensor([[0.1], [0.8]], dtype=F64)
    f = lambda z: a[: len(z)] * z + 1.0
    deq = deq_core.DEQ(solver="fixed_point", max_iter=100, tol=1e-6, stop_mode="abs")
    z, info = deq(f, torch.zeros(2, 3, dtype=F64), n_states=4)  # iterations 25, 50, 75, 100
    assert 50 < info.iterations < 75 and bool(info.converged.all())
    for state in info.states:
        torch.testing.assert_close(state[0], z[0], rtol=0, atol=1e-6)
    for state in info.states[2:]:
        assert torch.equal(state, z)
    assert (info.states[0][1] - z[1]).abs().max() > 1e-3  # sample 1 is still on its way at iteration 25
    _, alone = deq(f, torch.zeros(1, 3, dtype=F64), n_states=4)
    for state, own in zip(info.states, alone.states):
        assert torch.equal(state[:1], own)


def test_eval_limits_and_call_overrides_set_the_spacing():
    cell = Cell(norm=0.95)
    deq = deq_core.DEQ(solver="fixed_point", max_iter=30, eval_max_iter=12, tol=1e-12, warn_unconverged="never")
    z0 = zeros("tensor")
    expected = cell.flat_map(best_iterate(cell.flat_map, z0, "fixed_point", 4, 1e-12))  # 12 // 3 = 4
    _, info = deq.eval()(cell.flat_map, z0, n_states=3)
    torch.testing.assert_close(info.states[0], expected, rtol=0, atol=1e-14)
    _, info = deq.train()(cell.flat_map, z0, n_states=3, max_iter=12)
    torch.testing.assert_close(info.states[0], expected, rtol=0, atol=1e-14)


def test_without_states_the_info_has_none():
    z, info = deq_core.DEQ()(torch.cos, torch.zeros(2, 3))
    assert isinstance(z, torch.Tensor) and info.states is None


# --------------------------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------------------------


def exact_grads(cell: Cell, weights: torch.Tensor) -> list[torch.Tensor]:
    """Gradients of sum(weights * z*) by the dense implicit-function-theorem solve."""
    z_star = deq_core.solve(cell.flat_map, zeros("tensor"), tol=1e-14, max_iter=500, stop_mode="abs").z
    return list(torch.autograd.grad((weights * exact_fixed_point_layer(cell.flat_map, z_star)).sum(), cell.leaves))


def one_step_grads(cell: Cell, weights: torch.Tensor, iteration: int, steps: int = 1, tau: float = 1.0):
    """Gradients of sum(weights * z) for ``steps`` damped steps z <- (1 - tau) z + tau f(z) from the best iterate after
    ``iteration`` iterations (detached), backpropagated through those steps only."""
    z = best_iterate(cell.flat_map, zeros("tensor"), "anderson", iteration, 1e-12).detach()
    for _ in range(steps):
        z = (1 - tau) * z + tau * cell.flat_map(z)
    return list(torch.autograd.grad((weights * z).sum(), cell.leaves))


def implicit_deq() -> deq_core.DEQ:
    return deq_core.DEQ(max_iter=30, tol=1e-12, backward=deq_core.Implicit(max_iter=200, tol=1e-13))


def test_output_state_has_the_implicit_gradient_and_the_others_one_step():
    """With the implicit backward, the last state (the output) gets the implicit gradient of z*; the state at
    iteration i gets that of one step f(z_i) from its iterate, not the implicit gradient at z_i."""
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=F64)
    z, info = implicit_deq()(cell.flat_map, zeros("tensor"), n_states=3)  # iterations 10, 20, 30
    assert info.iterations > 10
    last = torch.autograd.grad((weights * info.states[-1]).sum(), cell.leaves, retain_graph=True)
    for g, e in zip(last, exact_grads(cell, weights)):
        assert rel_err(g, e) < 1e-9
    first = torch.autograd.grad((weights * info.states[0]).sum(), cell.leaves)
    for g, e in zip(first, one_step_grads(cell, weights, 10)):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)
    # the implicit gradient at z_10 (the adjoint solved with J_f(z_10)) would be another one
    z_10 = best_iterate(cell.flat_map, zeros("tensor"), "anderson", 10, 1e-12).detach()
    implicit_at_10 = torch.autograd.grad((weights * exact_fixed_point_layer(cell.flat_map, z_10)).sum(), cell.leaves)
    assert max(rel_err(g, e) for g, e in zip(first, implicit_at_10)) > 1e-2


def test_correction_loss_gradient_is_the_sum_of_the_states_gradients():
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=F64)
    gamma = (0.64, 0.8, 1.0)
    _, info = implicit_deq()(cell.flat_map, zeros("tensor"), states_at=(4, 8))
    loss = sum(g * (weights * s).sum() for g, s in zip(gamma, info.states))
    grads = torch.autograd.grad(loss, cell.leaves)
    parts = [one_step_grads(cell, weights, 4), one_step_grads(cell, weights, 8), exact_grads(cell, weights)]
    for i, g in enumerate(grads):
        expected = sum(c * p[i] for c, p in zip(gamma, parts))
        assert rel_err(g, expected) < 1e-9
    assert info.backward is not None and info.nfe_backward > 1  # the one adjoint solve, the output's


def test_with_phantom_backward_every_state_gets_phantom_steps():
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=F64)
    deq = deq_core.DEQ(max_iter=30, tol=1e-12, backward=deq_core.Phantom(steps=3, damping=0.6))
    _, info = deq(cell.flat_map, zeros("tensor"), states_at=(6,))
    grads = torch.autograd.grad((weights * info.states[0]).sum(), cell.leaves)
    for g, e in zip(grads, one_step_grads(cell, weights, 6, steps=3, tau=0.6)):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)


def test_unrolled_states_are_the_applications_of_f_with_backprop():
    cell = Cell()
    weights = torch.randn(BATCH, DIM, dtype=F64)
    z, info = deq_core.DEQ()(cell.flat_map, zeros("tensor"), unroll=10, n_states=3)  # 4, 7, 10 applications
    assert len(info.states) == 3 and info.states[-1] is z
    loss = sum((weights * s).sum() for s in info.states)
    grads = torch.autograd.grad(loss, cell.leaves)
    manual, state = [], zeros("tensor")
    for i in range(1, 11):
        state = cell.flat_map(state)
        if i in (4, 7, 10):
            manual.append(state)
    expected = torch.autograd.grad(sum((weights * s).sum() for s in manual), cell.leaves)
    for s, m in zip(info.states, manual):
        torch.testing.assert_close(s, m, rtol=0, atol=0)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)


def test_no_grad_states_are_the_same_values_without_a_graph():
    cell = Cell()
    counter = Counter(cell.flat_map)
    deq = implicit_deq()
    _, tracked = deq(cell.flat_map, zeros("tensor"), n_states=4)
    with torch.no_grad():
        z, info = deq(counter, zeros("tensor"), n_states=4)
    assert counter.calls == info.nfe + 3  # the states before the output; the output is the solver's f(z*)
    assert info.states[-1] is z
    for s, t in zip(info.states, tracked.states):
        assert not s.requires_grad
        torch.testing.assert_close(s, t, rtol=0, atol=1e-14)


@pytest.mark.parametrize("backward", ["implicit", "phantom"])
def test_states_are_plain_tensors_when_nothing_needs_a_gradient(backward):
    """As the output: f's parameters frozen and inputs without grad give states with requires_grad=False."""
    cell = Cell()
    for leaf in cell.leaves:
        leaf.requires_grad_(False)
    z, info = deq_core.DEQ(max_iter=30, backward=backward)(cell.flat_map, zeros("tensor"), n_states=3)
    assert not any(s.requires_grad for s in info.states) and info.states[-1] is z


@pytest.mark.parametrize("backward", ["implicit", "jfb", "phantom"])
def test_nan_sample_is_excluded_from_every_state(backward):
    """Sample 1's input is NaN (on_nonfinite="ignore"): every state is finite, and the gradient of a loss over all
    states equals that of the batch without sample 1."""
    cell = Cell()
    nan = torch.tensor([[0.0], [float("nan")], [0.0]], dtype=F64)
    strategy = deq_core.Implicit(max_iter=200, tol=1e-13) if backward == "implicit" else backward
    deq = deq_core.DEQ(max_iter=30, tol=1e-12, backward=strategy, on_nonfinite="ignore")

    def loss_and_grads(f, batch, rows):
        _, info = deq(f, zeros("tensor", batch), n_states=3)
        assert all(bool(torch.isfinite(s).all()) for s in info.states)
        loss = sum(s[rows].square().sum() for s in info.states)
        return torch.autograd.grad(loss, [cell.w, cell.u, cell.b])

    grads = loss_and_grads(lambda z: torch.tanh(z @ cell.w.T + (cell.x + nan) @ cell.u.T + cell.b), 3, [0, 2])
    x_good = cell.x.detach()[[0, 2]]
    expected = loss_and_grads(lambda z: torch.tanh(z @ cell.w.T + x_good @ cell.u.T + cell.b), 2, [0, 1])
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------------------


def _saved_bytes(fn) -> int:
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_saved_bytes_are_one_call_of_f_per_state_whatever_the_iterations():
    w = scaled_to_norm(torch.randn(16, 16), 0.95).requires_grad_()
    x = torch.randn(4, 16)
    f = lambda z: torch.tanh(z @ w.T + x)
    deq = deq_core.DEQ(tol=1e-6, backward=deq_core.Implicit(tol=1e-6), warn_unconverged="never")
    infos = []

    def call(max_iter, **states):
        z, info = deq(f, torch.zeros(4, 16), max_iter=max_iter, **states)
        infos.append(info)

    one = _saved_bytes(lambda: call(40))
    short, long = _saved_bytes(lambda: call(8, n_states=4)), _saved_bytes(lambda: call(40, n_states=4))
    assert infos[1].iterations < infos[2].iterations  # the second solve ran more iterations
    # the states' calls save less than the output's: their input z_i needs no gradient
    assert 0 < one < short == long <= 4 * one


# --------------------------------------------------------------------------------------------------------------
# The example
# --------------------------------------------------------------------------------------------------------------


def test_fixed_point_correction_example_runs(capsys):
    """The example trains for 40 steps and asserts that every state's loss falls five-fold; it prints 5 lines."""
    example = Path(__file__).resolve().parents[1] / "examples" / "fixed_point_correction.py"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the spectral norm is computed once per forward, the solves run
        runpy.run_path(str(example), run_name="__main__")
    assert capsys.readouterr().out.count("per state") == 5
