"""The backward costs O(1) memory in the number of solver iterations: the bytes of tensors saved for backward do not
depend on max_iter, and the implicit backward saves nothing more."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

import deq_core
from conftest import METHODS, scaled_to_norm


@contextmanager
def saved_bytes() -> Iterator[SimpleNamespace]:
    """Counts the tensors (and their bytes) that autograd saves for backward inside the ``with`` block."""
    record = SimpleNamespace(bytes=0, count=0)

    def pack(t: torch.Tensor) -> torch.Tensor:
        record.bytes += t.numel() * t.element_size()
        record.count += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield record


DIM, BATCH = 16, 4


def make_cell():
    w = scaled_to_norm(torch.randn(DIM, DIM), 0.95).requires_grad_()
    x = torch.randn(BATCH, DIM, requires_grad=True)
    return (lambda z: torch.tanh(z @ w.T + x)), (w, x)


# An ordinary tolerance: the tests compare solves that ran different numbers of iterations (asserted from the counts
# the solves report), never solves forced to run max_iter iterations by an unreachable tol (on some CPUs a solve
# reaches a residual of exactly 0 and stops early).
TOL = 1e-6


def forward_and_backward(deq: deq_core.DEQ, max_iter: int, **call):
    f, leaves = make_cell()
    with saved_bytes() as fwd:
        z, info = deq(f, torch.zeros(BATCH, DIM), max_iter=max_iter, tol=TOL, **call)
    loss = z.square().sum() + (info.jacobian_loss if info.jacobian_loss is not None else 0)
    with saved_bytes() as bwd:
        loss.backward()
    assert all(t.grad is not None for t in leaves)
    return fwd, bwd, info


@pytest.mark.parametrize("method", METHODS)
def test_saved_bytes_do_not_depend_on_iterations(method):
    deq = deq_core.DEQ(solver=method, backward=deq_core.Implicit("broyden", max_iter=40, tol=TOL))
    fwd5, bwd5, info5 = forward_and_backward(deq, 5)
    fwd50, bwd50, info50 = forward_and_backward(deq, 50)
    assert info5.iterations < info50.iterations  # the second solve ran more iterations (counted by the solver)
    assert fwd5.count > 0  # the tracked call f(z*) saves its tensors
    assert fwd5.bytes == fwd50.bytes
    assert fwd5.count == fwd50.count
    # the adjoint solve (several vector-Jacobian products) saves nothing
    assert info5.nfe_backward > 1 and info50.nfe_backward > 1
    assert bwd5.bytes == bwd50.bytes == 0


def test_saved_bytes_with_jacobian_loss_do_not_depend_on_iterations():
    deq = deq_core.DEQ(solver="anderson", backward=deq_core.Implicit(max_iter=20))
    fwd5, _, info5 = forward_and_backward(deq, 5, jacobian_loss=True)
    fwd50, _, info50 = forward_and_backward(deq, 50, jacobian_loss=True)
    assert info5.iterations < info50.iterations
    assert fwd5.bytes == fwd50.bytes > 0


def test_saved_bytes_do_not_depend_on_backward_iterations():
    small = deq_core.DEQ(backward=deq_core.Implicit("fixed_point", max_iter=2, tol=TOL))
    large = deq_core.DEQ(backward=deq_core.Implicit("fixed_point", max_iter=60, tol=TOL))
    fwd_s, bwd_s, info_s = forward_and_backward(small, 10)
    fwd_l, bwd_l, info_l = forward_and_backward(large, 10)
    assert info_s.nfe_backward < info_l.nfe_backward  # counted by the adjoint solve
    assert fwd_s.bytes == fwd_l.bytes
    assert bwd_s.bytes == bwd_l.bytes == 0


def test_unrolled_saved_bytes_grow_with_steps():
    """Control: the same measurement does see memory growing with depth when the iterations are backpropagated."""
    deq = deq_core.DEQ()
    f, _ = make_cell()
    with saved_bytes() as five:
        deq(f, torch.zeros(BATCH, DIM), unroll=5)
    with saved_bytes() as fifty:
        deq(f, torch.zeros(BATCH, DIM), unroll=50)
    assert fifty.bytes >= 9 * five.bytes > 0


def test_saved_bytes_independent_of_iterations_with_tuple_state():
    w = scaled_to_norm(torch.randn(7, 7), 0.9).requires_grad_()

    def f(z):
        y = torch.tanh(torch.cat([z[0].flatten(1), z[1]], 1) @ w.T + 1.0)
        return y[:, :4].reshape(-1, 2, 2), y[:, 4:]

    sizes, iterations = [], []
    for max_iter in (3, 30):
        z0 = (torch.zeros(BATCH, 2, 2), torch.zeros(BATCH, 3))
        with saved_bytes() as saved:
            out, info = deq_core.DEQ(solver="broyden")(f, z0, max_iter=max_iter, tol=TOL)
        sizes.append(saved.bytes)
        iterations.append(info.iterations)
        (out[0].sum() + out[1].sum()).backward()
    assert iterations[0] < iterations[1]  # counted, not assumed: Broyden may stop before 30 on some CPUs
    assert sizes[0] == sizes[1] > 0


def test_the_implicit_output_is_no_copy_of_the_tracked_call():
    """The layer's output under the implicit backward shares the memory of the tracked call f(z*), which the adjoint
    keeps for its vector-Jacobian products anyway: no state-sized copy (JFB returns the tracked call itself). Outside
    the solve the forward dispatches no clone; its gradient is unchanged (the same as through an explicit copy)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Clones(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += func.overloadpacket is torch.ops.aten.clone
            return func(*args, **(kwargs or {}))

    f, (w, x) = make_cell()
    deq = deq_core.DEQ("anderson", max_iter=40, tol=1e-5)
    clones = Clones()
    with clones:
        z, info = deq(f, torch.zeros(BATCH, DIM))
    assert clones.count == 0 and info.forward.all_converged
    (grad,) = torch.autograd.grad(z.square().sum(), w)
    z_copy, _ = deq(f, torch.zeros(BATCH, DIM))
    (grad_copy,) = torch.autograd.grad(z_copy.clone().square().sum(), w)
    assert torch.equal(grad, grad_copy)
