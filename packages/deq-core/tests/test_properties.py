"""Property tests: on random contractive maps every method converges and the result satisfies z = f(z)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import deq_core
from conftest import METHODS, flat, unflat

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)
LIPSCHITZ = 0.9


@st.composite
def contractive_problems(draw):
    """A random map z -> act(z W^T + b) with ||W||_2 <= 0.9 and act in {identity, tanh}, on a small batch."""
    batch = draw(st.integers(1, 4))
    dim = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    # no subnormal draws: a process with flush-to-zero set (e.g. a library built with -ffast-math) cannot represent
    # them, and hypothesis then refuses to run
    norm = draw(st.floats(0.0, LIPSCHITZ, allow_subnormal=False))
    bias_scale = draw(st.floats(0.0, 5.0, allow_subnormal=False))
    activation = draw(st.sampled_from(["affine", "tanh"]))
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    sigma = torch.linalg.matrix_norm(w, ord=2)
    w = w * (norm / sigma) if float(sigma) > 0 else w * 0
    b = bias_scale * torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    z0 = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    act = torch.tanh if activation == "tanh" else (lambda y: y)
    return (lambda z: act(z @ w.T + b)), z0, w, b, activation


@pytest.mark.parametrize("method", METHODS)
@SETTINGS
@given(problem=contractive_problems())
def test_contractive_maps_converge_to_the_fixed_point(method, problem):
    f, z0, w, b, activation = problem
    tol = 1e-9
    res = deq_core.solve(f, z0, solver=method, max_iter=400, tol=tol, stop_mode="abs")
    assert res.all_converged, res.summary()
    assert not bool(res.nonfinite.any())
    # the fixed-point equation holds to tolerance (recomputed) ...
    g = torch.linalg.vector_norm(f(res.z) - res.z, dim=1)
    assert bool((g <= tol * (1 + 1e-6) + 1e-13).all())
    torch.testing.assert_close(res.residual, g, rtol=1e-9, atol=1e-15)
    # ... hence, for a contraction with constant L, ||z - z*|| <= ||f(z) - z|| / (1 - L)
    if activation == "affine":
        exact = torch.linalg.solve(torch.eye(w.shape[0], dtype=torch.float64) - w, b.T).T
        dist = torch.linalg.vector_norm(res.z - exact, dim=1)
        assert bool((dist <= g / (1 - LIPSCHITZ) + 1e-12).all())
    else:  # the tanh map is also a contraction; z is near its unique fixed point
        again = deq_core.solve(f, torch.zeros_like(z0), solver="fixed_point", max_iter=1000, tol=1e-13, stop_mode="abs")
        dist = torch.linalg.vector_norm(res.z - again.z, dim=1)
        assert bool((dist <= (g + again.residual) / (1 - LIPSCHITZ) + 1e-12).all())


@pytest.mark.parametrize("method", METHODS)
@SETTINGS
@given(
    problem=contractive_problems(),
    shapes=st.lists(st.lists(st.integers(1, 3), min_size=0, max_size=2), min_size=1, max_size=3),
)
def test_structure_is_preserved_for_any_state_shapes(method, problem, shapes):
    """Reshaping the same flat problem into a tuple of tensors of arbitrary shapes gives the same fixed point."""
    f, z0, *_ = problem
    batch, dim = z0.shape
    sizes = [int(torch.tensor(s).prod()) if s else 1 for s in shapes]
    total = sum(sizes)

    # embed the problem in a state of `total` elements per sample: z -> f on the first dim, 0.5 z + 1 on the rest
    def big_f(state):
        x = flat(state)
        head, tail = x[:, :dim], x[:, dim:]
        return unflat(torch.cat([f(head), 0.5 * tail + 1.0], dim=1), state)

    z_state = tuple(torch.zeros(batch, *s, dtype=torch.float64) for s in shapes)
    z_state = unflat(
        torch.cat([z0, torch.zeros(batch, total, dtype=torch.float64)], 1),
        (torch.zeros(batch, dim, dtype=torch.float64), *z_state),
    )
    res = deq_core.solve(big_f, z_state, solver=method, max_iter=400, tol=1e-9, stop_mode="abs")
    assert isinstance(res.z, tuple) and len(res.z) == len(shapes) + 1
    for out, like in zip(res.z, z_state):
        assert out.shape == like.shape and out.dtype == like.dtype
    assert res.all_converged, res.summary()
    torch.testing.assert_close(
        flat(res.z)[:, dim:], torch.full((batch, total), 2.0, dtype=torch.float64), rtol=0, atol=1e-7
    )
