"""Limited-memory Broyden: the rank reduction applied when the update buffer is full."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import deq_core
from deq_core._solvers.broyden import _best_low_rank, _InverseJacobian


def _reduce_rank(us: Tensor, vs: Tensor, keep: int) -> int:
    """sum_i u_i v_i^T (rows of us, vs: (B, M, D)) replaced in place by its rank-``keep`` approximation from
    ``_best_low_rank`` (the solver's reduction, given the rows' Gram matrices), in the first slots, the rest zeroed;
    returns the number of slots kept (at most D)."""
    keep = min(keep, us.shape[2])
    grams = [torch.bmm(rows, rows.transpose(1, 2)) for rows in (us, vs)]
    coef_u, coef_v = _best_low_rank(*grams, keep, us.dtype)
    new_u, new_v = torch.bmm(coef_u, us), torch.bmm(coef_v, vs)
    us.zero_()
    vs.zero_()
    us[:, :keep], vs[:, :keep] = new_u, new_v
    return keep


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
        solver="broyden",
        max_iter=400,
        tol=1e-10,
        memory=4,
    )
    assert res.all_converged, res.summary()
    assert res.iterations > 8  # the buffer filled and was reduced several times
    torch.testing.assert_close(res.z, exact, rtol=1e-7, atol=1e-7)
    plain = deq_core.solve(
        lambda z: z @ a.T + b, torch.zeros(2, dim, dtype=torch.float64), solver="fixed_point", max_iter=400, tol=1e-10
    )
    assert not plain.all_converged


def _dense_good_broyden_residuals(f, x0: Tensor, iters: int, line_search: bool = False) -> Tensor:
    """Textbook good Broyden with a dense inverse Jacobian (float64, one sample): H_0 = I, x <- x + lam H g with
    g = f(x) - x, and H <- H + (s - H y) s^T H / (s^T H y), y = g_old - g_new. With ``line_search``, lam is halved up to
    3 times while ||g||^2 does not decrease by the Armijo factor (1 - 2e-4 lam). Returns ||g|| per iteration."""
    (dim,) = x0.shape[1:]
    inv = torch.eye(dim, dtype=x0.dtype)
    x = x0[0]
    g = f(x[None])[0] - x
    out = [g.norm()]
    for _ in range(iters - 1):
        d = inv @ g
        lam = 1.0
        x_new = x + d
        g_new = f(x_new[None])[0] - x_new
        for _ in range(3 if line_search else 0):
            if g_new.dot(g_new) <= (1 - 2e-4 * lam) * g.dot(g):
                break
            lam /= 2
            x_new = x + lam * d
            g_new = f(x_new[None])[0] - x_new
        s, y = x_new - x, g - g_new
        h_y = inv @ y
        inv = inv + torch.outer(s - h_y, s @ inv) / s.dot(h_y)
        x, g = x_new, g_new
        out.append(g.norm())
    return torch.stack(out)[:, None]


def _roundoff_floor(trace: Tensor) -> float:
    """The absolute residual below which the product form and the dense method may differ by rounding alone: float64
    eps times the first residual, amplified by at most 1e3 over the iterations (both are the same method, so their
    iterates differ only by rounding; measured: at most about 1e-16 x ||g_0|| on the runs of these tests)."""
    return 1e3 * torch.finfo(torch.float64).eps * float(trace[0].max())


def _tanh_map(dim: int, batch: int, radius: float, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    w = radius * w / torch.linalg.eigvals(w).abs().max()
    x = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    return lambda z: torch.tanh(z @ w.T + x[: z.shape[0]])


@pytest.mark.parametrize("memory", [30, 7])
def test_product_form_follows_the_dense_good_broyden_update(memory: int) -> None:
    """With the memory never full (30), every iterate is the textbook dense method's (residual norms equal to 1e-9
    relative, or to the round-off floor _roundoff_floor, over up to 25 iterations of a non-contractive map); with
    memory 7 the iterations up to the first rank reduction are, and later ones differ: the reduction is what changes
    them. The solve stops at an ordinary tol; the comparison covers the iterations it ran (counted, not assumed)."""
    f = _tanh_map(dim=20, batch=1, radius=1.4)
    x0 = torch.zeros(1, 20, dtype=torch.float64)
    res = deq_core.solve(f, x0, solver="broyden", max_iter=25, tol=1e-12, stop_mode="abs", memory=memory)
    iters = res.iterations
    assert iters > 8 + 5  # past the first reduction of memory 7, by several iterations
    dense = _dense_good_broyden_residuals(f, x0, iters)
    exact = min(memory + 1, iters)  # evaluations before the first reduction changes H
    torch.testing.assert_close(res.trace[:exact], dense[:exact], rtol=1e-9, atol=_roundoff_floor(dense))
    if memory + 1 < iters:
        assert not torch.allclose(res.trace[exact:], dense[exact:], rtol=1e-6, atol=0)


def test_product_form_with_line_search_follows_the_dense_update() -> None:
    """Shortened steps (lam < 1) enter the update through b0 = lam - 1: the iterates equal the dense method's with
    the same Armijo backtracking, on a map where the full step often fails the test."""
    f = _tanh_map(dim=12, batch=1, radius=2.5, seed=3)
    x0 = torch.zeros(1, 12, dtype=torch.float64)
    iters = 20
    res = deq_core.solve(
        f, x0, solver="broyden", max_iter=iters, tol=1e-12, stop_mode="abs", line_search=True, memory=40
    )
    assert res.nfe > res.iterations > 12  # some steps were shortened; the comparison spans many iterations
    dense = _dense_good_broyden_residuals(f, x0, res.iterations, True)
    torch.testing.assert_close(res.trace, dense, rtol=1e-9, atol=_roundoff_floor(dense))


def _truncated(mat: Tensor, rank: int) -> Tensor:
    u, s, vh = torch.linalg.svd(mat)
    return (u[:, :rank] * s[:rank]) @ vh[:rank]


def test_reduction_keeps_the_best_low_rank_part_of_the_dense_inverse_jacobian() -> None:
    """Two reductions (the second on top of a base of rank 3, where the cross terms with the base matter): each time
    the new base I + U^T V equals I + the best rank-3 approximation of H - I, H the dense inverse Jacobian that the
    same steps give from the previous base, and the next direction is that base applied to g."""
    dim = 16
    f = _tanh_map(dim=dim, batch=1, radius=1.2, seed=5)
    x = torch.zeros(1, dim, dtype=torch.float64)
    g = f(x) - x
    inverse = _InverseJacobian(g, memory=7)
    dense = torch.eye(dim, dtype=torch.float64)
    for _ in range(2):
        while not inverse.full:
            x_new = x + inverse.direction
            g_new = f(x_new) - x_new
            s, y = (x_new - x)[0], (g - g_new)[0]
            h_y = dense @ y
            dense = dense + torch.outer(s - h_y, s @ dense) / s.dot(h_y)
            inverse.update(g_new, None)
            x, g = x_new, g_new
        inverse.reduce(g)
        u, v = inverse.base_u[0], inverse.base_v[0]
        eye = torch.eye(dim, dtype=torch.float64)
        torch.testing.assert_close(u.T @ v, _truncated(dense - eye, 3), rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(inverse.direction[0], (eye + u.T @ v) @ g[0], rtol=1e-10, atol=1e-12)
        dense = eye + u.T @ v  # the next updates build on the reduced base


@pytest.mark.parametrize("memory", [1, 2, 3])
def test_tiny_memories_still_solve_a_contraction(memory: int) -> None:
    """memory 1 keeps nothing at a reduction (each update is dropped at once: plain fixed-point steps), memory 2-3
    keep a rank-1 base; all reach the exact fixed point of a contraction, with a sample that starts converged."""
    gen = torch.Generator().manual_seed(7)
    dim = 10
    a = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    a = 0.8 * a / torch.linalg.eigvals(a).abs().max()
    b = torch.randn(4, dim, generator=gen, dtype=torch.float64)
    b[0] = 0.0  # sample 0 starts at its fixed point (z0 = 0)
    exact = torch.linalg.solve(torch.eye(dim, dtype=torch.float64) - a, b.T).T
    res = deq_core.solve(
        lambda z: z @ a.T + b, torch.zeros(4, dim, dtype=torch.float64), solver="broyden", max_iter=300, tol=1e-11,
        stop_mode="abs", memory=memory,
    )  # fmt: skip
    assert res.all_converged, res.summary()
    torch.testing.assert_close(res.z, exact, rtol=1e-9, atol=1e-9)


def test_a_sample_with_overflowed_directions_restarts_alone_at_the_reduction() -> None:
    """An Inf in one sample's stored directions (float32 overflow) must neither reach LAPACK (whose eigh raises on it
    for the whole batch) nor the other samples: at the reduction that sample's base is zero (H restarts from I) and
    the other sample's base is what it is without the Inf."""
    f = _tanh_map(dim=16, batch=2, radius=1.2, seed=5)

    def run(poison: bool) -> _InverseJacobian:
        x = torch.zeros(2, 16, dtype=torch.float64)
        g = f(x) - x
        inverse = _InverseJacobian(g, memory=6)
        while not inverse.full:
            x = x + inverse.direction
            g = f(x) - x
            inverse.update(g, None)
        if poison:
            inverse.dirs[1, 2, 3] = float("inf")
        inverse.reduce(g)
        return inverse

    clean, poisoned = run(False), run(True)
    assert torch.isfinite(poisoned.base_u).all() and torch.isfinite(poisoned.base_v).all()
    assert bool((poisoned.base_u[1] == 0).all()) and bool((poisoned.base_v[1] == 0).all())
    torch.testing.assert_close(poisoned.base_u[0], clean.base_u[0])
    torch.testing.assert_close(poisoned.base_v[0], clean.base_v[0])
    assert torch.isfinite(poisoned.direction).all()


@pytest.mark.parametrize("options", [{}, {"memory": 6}, {"memory": 6, "line_search": True}], ids=str)
def test_no_unwritten_row_of_the_direction_buffer_is_read(monkeypatch, options: dict) -> None:
    """Buffers allocated uninitialized (the loop's, Anderson's output) are written before they are read: filled with
    NaN instead, the solve must be bit for bit the same (also through rank reductions and line searches)."""
    gen = torch.Generator().manual_seed(11)
    w = torch.randn(24, 24, generator=gen, dtype=torch.float64)
    w = 0.95 * w / torch.linalg.eigvals(w).abs().max()  # near-critical: the solve runs through several reductions
    x = 0.1 * torch.randn(4, 24, generator=gen, dtype=torch.float64)

    def f(z: Tensor) -> Tensor:
        return torch.tanh(z @ w.T + x)

    z0 = torch.zeros(4, 24, dtype=torch.float64)
    plain = deq_core.solve(f, z0, deq_core.Broyden(**options), max_iter=60, tol=1e-10)
    real_new_empty = torch.Tensor.new_empty

    def poisoned(self: Tensor, *size: object, **kwargs: object) -> Tensor:
        return real_new_empty(self, *size, **kwargs).fill_(float("nan"))

    monkeypatch.setattr(torch.Tensor, "new_empty", poisoned)
    nan_filled = deq_core.solve(f, z0, deq_core.Broyden(**options), max_iter=60, tol=1e-10)
    assert plain.nfe >= 20 and bool(plain.converged.all())
    assert nan_filled.nfe == plain.nfe and torch.equal(nan_filled.z, plain.z)
    assert torch.equal(nan_filled.trace, plain.trace)


def _issue_problem(dim: int = 256, batch: int = 32, norm: float = 0.95):
    """tanh(z W^T + x) with ||W||_2 = norm (a contraction: Broyden stops by tolerance after about 10 iterations at
    rel tol 1e-4), float32, and z0 = 0."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(dim, dim, generator=gen)
    w = norm * w / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(batch, dim, generator=gen)
    return (lambda z: torch.tanh(z @ w.T + x)), torch.zeros(batch, dim)


def test_storage_follows_the_iterations_made_not_the_limit() -> None:
    """The same 10-iteration solve at max_iter 12 and 3000: the same iterates, and the large limit allocates less than
    twice the small one's peak (counted in bytes; before the buffers grew with use, max_iter 3000 allocated three
    3001 x 3001 float64 matrices per sample, about 7 GB here)."""
    f, z0 = _issue_problem()
    (small, small_peak) = deq_core.peak_live_bytes(lambda: deq_core.solve(f, z0, "broyden", max_iter=12, tol=1e-4))
    (large, large_peak) = deq_core.peak_live_bytes(lambda: deq_core.solve(f, z0, "broyden", max_iter=3000, tol=1e-4))
    assert small.all_converged and small.iterations == large.iterations < 12
    assert torch.equal(small.z, large.z) and torch.equal(small.trace, large.trace)
    assert large_peak < 2 * small_peak, (small_peak, large_peak)


def test_the_implicit_backward_allocates_by_use_too() -> None:
    """The backward's Broyden solve with a generous limit costs what it uses: peak bytes of a backward pass at
    max_iter 3000 below twice those at max_iter 30, with the same gradient."""
    f0, z0 = _issue_problem(batch=8)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(6), requires_grad=True)

    def backward(limit: int) -> tuple[Tensor, int]:
        deq = deq_core.DEQ(solver="anderson", max_iter=40, tol=1e-5,
                           backward=deq_core.Implicit("broyden", max_iter=limit, tol=1e-5))  # fmt: skip
        z, info = deq(lambda z: f0(z) + x, z0)
        _, peak = deq_core.peak_live_bytes(lambda: z.square().sum().backward())
        assert info.backward is not None and info.backward.all_converged, info.backward
        grad, x.grad = x.grad, None
        return grad, peak

    small_grad, small_peak = backward(30)
    large_grad, large_peak = backward(3000)
    assert torch.equal(small_grad, large_grad)
    assert large_peak < 2 * small_peak, (small_peak, large_peak)


def test_a_long_solve_grows_its_storage_to_the_same_iterates() -> None:
    """A solve of about 40 iterations grows its buffers several times (from 16 factors); at max_iter = its own iteration
    count the buffers stop at max_iter factors, at max_iter 3000 they double past it: the iterates are the same."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    w = 2.5 * w / torch.linalg.matrix_norm(w, ord=2)  # not a contraction: Broyden needs tens of iterations
    x = torch.randn(4, 48, generator=gen, dtype=torch.float64)

    def f(z: Tensor) -> Tensor:
        return torch.tanh(z @ w.T + x)

    z0 = torch.zeros(4, 48, dtype=torch.float64)
    free = deq_core.solve(f, z0, "broyden", max_iter=3000, tol=1e-10)
    assert free.all_converged and free.iterations > 33, free.summary()
    tight = deq_core.solve(f, z0, "broyden", max_iter=free.iterations, tol=1e-10)
    assert tight.iterations == free.iterations
    assert torch.equal(tight.z, free.z) and torch.equal(tight.trace, free.trace)
