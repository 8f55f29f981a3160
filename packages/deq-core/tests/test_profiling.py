"""deq_core.saved_tensor_bytes and deq_core.peak_live_bytes on graphs and allocations whose sizes are known."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

import deq_core
from conftest import scaled_to_norm

MIB = 2**20
FLOAT = 4  # bytes of a float32


# ---- saved_tensor_bytes ----------------------------------------------------------------------------------------------


def linear_tanh():
    """tanh(x @ w) with x (8, 16) and w (16, 32), both requiring grad: mm saves x and w, tanh saves its output."""
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 32, requires_grad=True)
    return x, w, (lambda: torch.tanh(x @ w))


def test_saved_bytes_of_a_known_graph():
    x, w, fn = linear_tanh()
    out, saved = deq_core.saved_tensor_bytes(fn)
    torch.testing.assert_close(out, torch.tanh(x @ w))  # the result of fn is returned
    assert saved == (8 * 16 + 16 * 32 + 8 * 32) * FLOAT


def test_saved_bytes_exclude_leaves_out_the_given_tensors():
    x, w, fn = linear_tanh()
    assert deq_core.saved_tensor_bytes(fn, exclude=[w])[1] == (8 * 16 + 8 * 32) * FLOAT
    assert deq_core.saved_tensor_bytes(fn, exclude=[x, w])[1] == 8 * 32 * FLOAT
    # excluding a view excludes its whole storage
    assert deq_core.saved_tensor_bytes(fn, exclude=iter([x[:1], w.T]))[1] == 8 * 32 * FLOAT


def test_saved_bytes_batch_size_keeps_tensors_with_that_first_dim():
    _, _, fn = linear_tanh()
    assert deq_core.saved_tensor_bytes(fn, batch_size=8)[1] == (8 * 16 + 8 * 32) * FLOAT  # x and tanh's output
    assert deq_core.saved_tensor_bytes(fn, batch_size=16)[1] == 16 * 32 * FLOAT  # w
    assert deq_core.saved_tensor_bytes(fn, batch_size=3)[1] == 0


def test_saved_bytes_count_a_storage_once_whatever_its_views():
    """Two views (at different offsets) of one buffer saved by two ops: the buffer counts once, whole."""
    w = torch.randn(10, requires_grad=True)
    base = torch.randn(8, 10, requires_grad=True)

    def fn():
        y = base * 1.0  # one (8, 10) buffer; mul by a Python scalar saves nothing
        return (y[:4] * w).sum() + (y[4:] * w).sum()  # each mul saves its view of y and w

    assert deq_core.saved_tensor_bytes(fn)[1] == (8 * 10 + 10) * FLOAT
    assert deq_core.saved_tensor_bytes(fn, batch_size=4)[1] == 8 * 10 * FLOAT


def test_saved_bytes_count_storages_freed_during_fn():
    """A graph dropped inside fn still counted, and a later storage allocated where it was counts again."""
    x = torch.randn(1000, requires_grad=True)

    def fn():
        for _ in range(20):
            y = (x * 2.0).exp()  # exp saves its output
            del y  # graph and saved output freed; the next iteration's output may take its place

    assert deq_core.saved_tensor_bytes(fn)[1] == 20 * 1000 * FLOAT


def test_saved_bytes_nothing_under_no_grad_and_custom_function():
    x, _, fn = linear_tanh()
    with torch.no_grad():
        assert deq_core.saved_tensor_bytes(fn)[1] == 0

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)  # seen
            ctx.kept = t * 1.0  # a plain attribute: not seen
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2 * t * g

    assert deq_core.saved_tensor_bytes(lambda: Square.apply(x))[1] == x.nbytes


def test_saved_bytes_measured_forward_trains_and_frees_as_usual():
    """The measured graph gives the usual gradients, frees its saved outputs when dropped, and still refuses a saved
    tensor modified in place."""
    x, w, fn = linear_tanh()
    out, _ = deq_core.saved_tensor_bytes(fn)
    out.square().sum().backward()
    expected = torch.autograd.grad(fn().square().sum(), (x, w))
    torch.testing.assert_close((x.grad, w.grad), expected)

    out, _ = deq_core.saved_tensor_bytes(fn)  # tanh saves its output: the graph refers to out's storage
    storage = weakref.ref(out.untyped_storage())
    del out
    assert storage() is None

    out, _ = deq_core.saved_tensor_bytes(fn)
    out.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# ---- peak_live_bytes -------------------------------------------------------------------------------------------------


def test_peak_of_two_buffers_alive_together_or_not():
    def both_alive():
        a = torch.empty(MIB // FLOAT)
        b = torch.empty(2 * MIB // FLOAT)
        return a.numel() + b.numel()

    def one_after_the_other():
        a = torch.zeros(MIB // FLOAT)
        del a
        b = torch.ones(2 * MIB // FLOAT)
        return b.numel()

    out, peak = deq_core.peak_live_bytes(both_alive)
    assert out == 3 * MIB // FLOAT
    assert 3 * MIB <= peak <= 3 * MIB + 1024
    assert 2 * MIB <= deq_core.peak_live_bytes(one_after_the_other)[1] <= 2 * MIB + 1024


def test_peak_does_not_count_tensors_alive_before_fn():
    a = torch.randn(MIB // FLOAT)

    def fn():
        a.add_(1.0)  # in place
        v = a.view(-1, 4)[1:]  # a view of a
        return a[: 1024 // FLOAT].clone() + v.sum()  # 1 KiB clone, scalar sum, their 1 KiB sum

    peak = deq_core.peak_live_bytes(fn)[1]
    assert 2 * 1024 <= peak <= 2 * 1024 + 64


def test_peak_sees_backward():
    """Forward: a 4-byte sum; backward: the 1 MiB gradient of x (an expanded scalar copied into x.grad)."""
    x = torch.randn(MIB // FLOAT, requires_grad=True)
    peak = deq_core.peak_live_bytes(lambda: x.sum().backward())[1]
    assert x.grad is not None
    assert MIB <= peak <= MIB + 1024


def test_peak_follows_a_storage_resized_by_out():
    a = torch.randn(MIB // FLOAT)

    def fn():
        buf = torch.empty(0)  # created empty, then resized to 1 MiB by the out= op
        torch.add(a, 1.0, out=buf)
        return buf

    out, peak = deq_core.peak_live_bytes(fn)
    assert out.nbytes == MIB
    assert MIB <= peak <= MIB + 64


def test_peak_on_the_meta_device():
    """No memory is allocated on the meta device, and every meta storage has data pointer 0: storages are told apart
    by identity, so the peak is the one the same code would reach on a real device."""

    def fn():
        a = torch.empty(MIB // FLOAT, device="meta")
        b = torch.empty(2 * MIB // FLOAT, device="meta")
        del a
        c = torch.empty(MIB // FLOAT, device="meta")
        return b, c

    assert deq_core.peak_live_bytes(fn)[1] == 3 * MIB


def test_peak_leaves_no_mode_behind_on_error():
    def fn():
        torch.empty(10)
        raise ValueError("inside fn")

    with pytest.raises(ValueError, match="inside fn"):
        deq_core.peak_live_bytes(fn)
    assert _get_current_dispatch_mode() is None


# ---- DEQ: implicit backward vs unrolled ------------------------------------------------------------------------------

DIM, BATCH = 64, 16


def deq_step(max_iter: int, unroll: bool):
    """The forward and the training step (forward + backward) of a DEQ on a tanh cell, with the implicit backward or
    backpropagating through the unrolled iterations; and the leaves (parameter, input)."""
    w = scaled_to_norm(torch.randn(DIM, DIM), 0.9).requires_grad_()
    x = torch.randn(BATCH, DIM)
    backward = deq_core.Implicit(max_iter=10, tol=1e-6)
    deq = deq_core.DEQ(solver="anderson", max_iter=max_iter, tol=1e-6, backward=backward)
    iterations: list[int] = []  # of every forward call (the solve stops at tol: counted, not assumed)

    def forward():
        f = lambda z: torch.tanh(z @ w.T + x)
        z, info = deq(f, torch.zeros(BATCH, DIM), unroll=max_iter if unroll else None)
        iterations.append(info.iterations)
        return z

    return forward, (lambda: forward().square().sum().backward()), (w, x), iterations


@pytest.mark.parametrize("unroll", [False, True])
def test_deq_saved_and_peak_bytes_against_iterations(unroll):
    saved, peak, iterations = [], [], []
    for max_iter in (10, 40):  # both past Anderson's history (m = 8), which a shorter limit caps
        forward, step, leaves, counts = deq_step(max_iter, unroll)
        saved.append(deq_core.saved_tensor_bytes(forward, exclude=leaves)[1])
        peak.append(deq_core.peak_live_bytes(step)[1])
        iterations.append(counts[-1])
    assert iterations[0] < iterations[1]  # the second solve ran more iterations
    state = BATCH * DIM * FLOAT
    if unroll:  # every application of f saves its output (and its input)
        assert saved[1] - saved[0] >= 30 * state
        assert peak[1] - peak[0] >= 30 * state
    else:  # the one tracked call f(z*), however many iterations the solve takes
        assert saved[0] == saved[1] > 0
        assert saved[0] <= 3 * state
        # the solver's buffers do not grow either; only the residual trace of DEQInfo does (one number per sample and
        # iteration: at most 8 bytes x BATCH x 30 more iterations, against >= 30 states when unrolled)
        assert abs(peak[1] - peak[0]) <= 30 * BATCH * 8
