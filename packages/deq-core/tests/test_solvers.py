"""deq_core.solve: fixed points of maps with known solutions, result structure, and the solver statistics."""

from __future__ import annotations

import math

import pytest
import torch

import deq_core
from conftest import (
    FLOAT_DTYPES,
    METHODS,
    Counter,
    affine_map,
    flat,
    make_state,
    random_contractions,
    state_dim,
    tensors_of,
    unflat,
)

COS_FIXED_POINT = 0.7390851332151607
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
EPS = {torch.float32: torch.finfo(torch.float32).eps, torch.float64: torch.finfo(torch.float64).eps}


def assert_same_structure(out, like) -> None:
    """``out`` has the container type, number, shapes and dtypes of ``like``'s tensors."""
    assert type(out) is type(like)
    out_t, like_t = tensors_of(out), tensors_of(like)
    assert len(out_t) == len(like_t)
    for o, t in zip(out_t, like_t):
        assert isinstance(o, torch.Tensor)
        assert o.shape == t.shape
        assert o.dtype == t.dtype


def recomputed_residual(f, z, stop_mode: str) -> torch.Tensor:
    """The residual of z recomputed from scratch, in float64."""
    x = flat(z, torch.float64)
    fx = flat(f(z), torch.float64)
    diff = torch.linalg.vector_norm(fx - x, dim=1)
    return diff if stop_mode == "abs" else diff / torch.linalg.vector_norm(fx, dim=1)


def assert_consistent_stats(res, counter: Counter, batch: int, line_search: bool = False) -> None:
    """The statistics every SolverResult must satisfy."""
    assert res.nfe == counter.calls
    assert res.trace.shape == (res.iterations, batch)
    assert 1 <= res.iterations <= res.max_iter
    if line_search:
        assert res.nfe >= res.iterations
    else:
        assert res.nfe == res.iterations
    assert res.residual.shape == (batch,)
    assert res.converged.shape == (batch,) and res.converged.dtype == torch.bool
    assert res.nonfinite.shape == (batch,) and res.nonfinite.dtype == torch.bool
    # the returned iterate is the best one of the trace
    torch.testing.assert_close(res.residual, res.trace.min(dim=0).values, rtol=0, atol=0)
    assert torch.equal(res.converged, res.residual <= res.tol)


# --------------------------------------------------------------------------------------------------------------
# 1. Known fixed points, every method x state structure x dtype
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("method", METHODS)
def test_affine_contraction_reaches_exact_solution(method, kind, dtype):
    batch = 4
    z0 = make_state(kind, batch, dtype)
    dim = state_dim(z0)
    mats = random_contractions(batch, dim, 0.8)
    bias = torch.randn(batch, dim, dtype=torch.float64)
    counter = Counter(affine_map(mats, bias))
    tol = TOL[dtype]

    res = deq_core.solve(counter, z0, solver=method, max_iter=300, tol=tol)

    assert_same_structure(res.z, z0)
    assert_same_structure(res.fz, z0)
    assert res.all_converged, res.summary()
    assert bool((res.residual <= tol).all())
    assert not bool(res.nonfinite.any())
    assert_consistent_stats(res, counter, batch)

    eye = torch.eye(dim, dtype=torch.float64)
    exact = torch.linalg.solve(eye - mats, bias)  # per sample (I - A) z = b
    z = flat(res.z, torch.float64)
    fz = torch.einsum("bij,bj->bi", mats, z) + bias
    dist = torch.linalg.vector_norm(z - exact, dim=1)
    # z - z* = (A - I)^{-1} (f(z) - z), and ||f(z) - z|| <= tol ||f(z)|| up to the rounding of the dtype.
    inv_norm = torch.linalg.matrix_norm(torch.linalg.inv(eye - mats), ord=2)
    rounding = 100 * EPS[dtype] * (z.norm(dim=1) + bias.norm(dim=1))
    bound = inv_norm * (tol * fz.norm(dim=1) + rounding)
    assert bool((dist <= bound).all()), (dist, bound)
    # and the solve did something: the start was far away
    assert bool((torch.linalg.vector_norm(flat(z0, torch.float64) - exact, dim=1) > 100 * bound).all())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("method", METHODS)
def test_cosine_fixed_point(method, kind, dtype):
    batch = 3
    z0 = make_state(kind, batch, dtype)
    counter = Counter(lambda z: torch.cos(z) if isinstance(z, torch.Tensor) else tuple(torch.cos(t) for t in z))
    tol = TOL[dtype]

    res = deq_core.solve(counter, z0, solver=method, max_iter=200, tol=tol)

    assert_same_structure(res.z, z0)
    assert res.all_converged, res.summary()
    assert_consistent_stats(res, counter, batch)
    z = flat(res.z, torch.float64)
    f_norm = torch.cos(z).norm(dim=1, keepdim=True)
    # |z_i - z*| <= |cos z_i - z_i| / (1 - sin z*) (about 3.07 |g_i|) and |g_i| <= ||g|| <= tol ||f(z)||
    bound = 3.2 * (tol * f_norm + 100 * EPS[dtype])
    assert bool(((z - COS_FIXED_POINT).abs() <= bound).all())


@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("method", METHODS)
def test_bfloat16_state_is_solved_in_float32(method, kind):
    z0 = make_state(kind, 2, torch.bfloat16, fill=0.0)
    counter = Counter(lambda z: torch.cos(z) if isinstance(z, torch.Tensor) else tuple(torch.cos(t) for t in z))

    # The returned z is rounded to bfloat16 (relative spacing eps = 2^-7) and its residual is the one reported: with
    # rounding errors of up to eps / 2 in z and in f(z), a tol of a few eps is what a bfloat16 state can meet.
    tol = 4 * torch.finfo(torch.bfloat16).eps
    res = deq_core.solve(counter, z0, solver=method, max_iter=50, tol=tol)

    assert_same_structure(res.z, z0)  # bfloat16 out
    assert_same_structure(res.fz, z0)
    assert res.residual.dtype == torch.float32
    assert res.trace.dtype == torch.float32
    assert all(d == (torch.bfloat16,) * len(tensors_of(z0)) for d in counter.input_dtypes)  # f runs in bf16
    assert res.all_converged, res.summary()
    assert res.nfe == counter.calls
    # |z_i - z*| <= 3.07 |g_i| (see test_cosine_fixed_point) and |g_i| <= ||g|| <= tol ||f(z)||
    bound = 3.2 * tol * float(torch.linalg.vector_norm(flat(res.fz, torch.float64), dim=1).max())
    for t in tensors_of(res.z):
        assert float((t.double() - COS_FIXED_POINT).abs().max()) <= bound


@pytest.mark.parametrize("method", METHODS)
def test_mixed_dtype_tuple_solves_in_float64_and_keeps_dtypes(method):
    z0 = (torch.zeros(2, 3, dtype=torch.float32), torch.zeros(2, 2, 2, dtype=torch.float64))
    seen = []

    def f(z):
        seen.append(tuple(t.dtype for t in z))
        return tuple(torch.cos(t) for t in z)

    res = deq_core.solve(f, z0, solver=method, max_iter=200, tol=1e-6)
    assert_same_structure(res.z, z0)
    assert res.residual.dtype == torch.float64
    assert set(seen) == {(torch.float32, torch.float64)}
    assert res.all_converged


@pytest.mark.parametrize("method", METHODS)
def test_list_state_returns_list(method):
    z0 = [torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)]
    res = deq_core.solve(lambda z: [torch.cos(t) for t in z], z0, solver=method, max_iter=200, tol=1e-10)
    assert_same_structure(res.z, z0)
    assert_same_structure(res.fz, z0)
    assert res.all_converged


@pytest.mark.parametrize("method", METHODS)
def test_z0_is_not_modified(method):
    z0 = torch.randn(3, 5, dtype=torch.float64)
    before = z0.clone()
    deq_core.solve(torch.cos, z0, solver=method, max_iter=50, tol=1e-8)
    assert torch.equal(z0, before)


# --------------------------------------------------------------------------------------------------------------
# 2. Statistics
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_mode", ["abs", "rel"])
@pytest.mark.parametrize("kind", ["tensor", "tuple"])
@pytest.mark.parametrize("method", METHODS)
def test_residual_is_that_of_returned_z_in_stop_mode(method, kind, stop_mode):
    batch = 3
    z0 = make_state(kind, batch, torch.float64)
    dim = state_dim(z0)
    mats = random_contractions(batch, dim, 0.7)
    bias = 20.0 * torch.randn(batch, dim, dtype=torch.float64)  # ||f(z)|| far from 1: abs and rel differ
    f = affine_map(mats, bias)
    counter = Counter(f)
    tol = 1e-9

    res = deq_core.solve(counter, z0, solver=method, max_iter=200, tol=tol, stop_mode=stop_mode)

    assert res.stop_mode == stop_mode
    assert_consistent_stats(res, counter, batch)
    assert res.all_converged
    abs_res = recomputed_residual(f, res.z, "abs")
    rel_res = recomputed_residual(f, res.z, "rel")
    expected = abs_res if stop_mode == "abs" else rel_res
    torch.testing.assert_close(res.residual, expected, rtol=1e-6, atol=1e-15)
    # the two definitions really differ here (rel = abs / ||f(z)||), so the check above distinguishes them
    assert bool((torch.linalg.vector_norm(flat(f(res.z)), dim=1) > 3).all())
    # fz is f(z)
    torch.testing.assert_close(flat(res.fz), flat(f(res.z)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_residual_trace_of_unconverged_solve(method):
    """Also when nothing converges: trace min is the residual, and the residual is that of res.z.

    The map has no fixed point (every component of f(z) - z is >= 0.099 x 0.5), so no solve can converge on any CPU:
    not an unreachable tol, a residual bounded below (abs residual >= 0.099 for 4 components)."""
    batch = 2
    scale = torch.tensor([[0.99], [0.995]], dtype=torch.float64)
    f = lambda z: z + 0.1 * scale * (1 + 0.5 * torch.sin(z))  # nonlinear, no fixed point
    counter = Counter(f)
    z0 = torch.full((batch, 4), 3.0, dtype=torch.float64)
    res = deq_core.solve(counter, z0, solver=method, max_iter=6, tol=1e-3, stop_mode="abs")
    assert_consistent_stats(res, counter, batch)
    assert res.iterations == 6 and not bool(res.converged.any())
    assert bool((res.residual >= 0.099).all())
    torch.testing.assert_close(res.residual, recomputed_residual(f, res.z, "abs"), rtol=1e-10, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_converged_sample_stops_changing(method):
    """Sample 0 starts within tolerance (but not exactly at its fixed point); sample 1 needs many iterations."""
    bias = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]], dtype=torch.float64)
    wiggle = torch.tensor([[0.0], [1.0]], dtype=torch.float64)  # sample 1 is nonlinear (Broyden needs > 3 steps)

    def f(z):
        return 0.9 * z + bias + wiggle * 0.05 * torch.sin(3 * z)  # sample 0: fixed point 10 * bias

    z0 = torch.stack([10 * bias[0] + 1e-9, torch.zeros(3, dtype=torch.float64)])
    res = deq_core.solve(f, z0, solver=method, max_iter=300, tol=1e-8, stop_mode="abs")

    assert res.all_converged, res.summary()
    assert res.iterations >= 5  # sample 1 needed more work
    assert torch.equal(res.z[0], z0[0])  # sample 0 kept its start, bit for bit
    assert bool((res.trace[:, 0] == res.trace[0, 0]).all())  # and its residual never changed
    assert 0 < float(res.trace[0, 0]) <= 1e-8
    assert float(res.residual[0]) == float(res.trace[0, 0])
    assert float(res.trace[0, 1]) > 1.0


@pytest.mark.parametrize("method", METHODS)
def test_sample_at_its_fixed_point_returns_z0_exactly(method):
    """A sample whose start is an exact fixed point has zero residual and keeps z0 exactly."""
    mats = random_contractions(2, 4, 0.9)
    f = affine_map(mats, torch.zeros(2, 4, dtype=torch.float64))  # fixed point 0
    z0 = torch.stack([torch.zeros(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)])
    res = deq_core.solve(f, z0, solver=method, max_iter=300, tol=1e-10, stop_mode="abs")
    assert res.all_converged
    assert torch.equal(res.z[0], z0[0])
    assert bool((res.trace[:, 0] == 0).all())
    assert res.iterations > 5


@pytest.mark.parametrize("max_iter", [1, 7])
@pytest.mark.parametrize("method", METHODS)
def test_max_iter_is_respected(method, max_iter):
    counter = Counter(lambda z: z + 1.0)  # no fixed point: no method can converge
    z0 = torch.zeros(3, 4, dtype=torch.float64)
    res = deq_core.solve(counter, z0, solver=method, max_iter=max_iter, tol=1e-12, stop_mode="abs")
    assert res.iterations == max_iter
    assert res.nfe == max_iter == counter.calls
    assert res.trace.shape == (max_iter, 3)
    assert not bool(res.converged.any())
    assert res.max_iter == max_iter
    if max_iter == 1:
        assert torch.equal(res.z, z0)


def test_best_iterate_is_returned_when_iteration_diverges():
    """Plain iteration on z -> A z with A = diag(0.5, -1.5): the residual first falls (the 0.5 direction dominates),
    then grows (the -1.5 direction takes over). The solver returns the iterate with the smallest residual."""
    a = torch.tensor([0.5, -1.5], dtype=torch.float64)
    f = lambda z: a * z
    z0 = torch.tensor([[1.0, 1e-6]], dtype=torch.float64)
    res = deq_core.solve(f, z0, solver="fixed_point", max_iter=30, tol=1e-12, stop_mode="abs")

    trace = res.trace[:, 0]
    best = int(trace.argmin())
    assert 0 < best < res.iterations - 1  # a true interior minimum
    assert float(trace[-1]) > 100 * float(trace[best])
    assert float(res.residual[0]) == float(trace.min())
    iterates = [z0[0] * a**k for k in range(res.iterations)]
    torch.testing.assert_close(res.z[0], iterates[best], rtol=1e-12, atol=0)
    torch.testing.assert_close(res.residual, recomputed_residual(f, res.z, "abs"), rtol=1e-12, atol=0)
    assert not res.all_converged


# --------------------------------------------------------------------------------------------------------------
# 3. Non-contractive maps: fixed-point iteration diverges, Broyden converges
# --------------------------------------------------------------------------------------------------------------


def _expanding_affine(batch: int, dim: int):
    """Symmetric A with eigenvalues (-1.5, 0.5, -0.3, 0.8, ...): spectral radius 1.5, I - A invertible."""
    q, _ = torch.linalg.qr(torch.randn(batch, dim, dim, dtype=torch.float64))
    eig = torch.tensor([-1.5, 0.5, -0.3, 0.8, 0.2, -0.6][:dim], dtype=torch.float64)
    mats = q @ torch.diag_embed(eig.expand(batch, dim)) @ q.transpose(1, 2)
    bias = torch.randn(batch, dim, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(dim, dtype=torch.float64) - mats, bias)
    return affine_map(mats, bias), exact


@pytest.mark.parametrize("line_search", [False, True])
def test_broyden_converges_where_fixed_point_iteration_diverges(line_search):
    f, exact = _expanding_affine(3, 4)
    z0 = torch.zeros(3, 4, dtype=torch.float64)

    plain = deq_core.solve(f, z0, solver="fixed_point", max_iter=60, tol=1e-8)
    assert not bool(plain.converged.any())
    assert float(plain.trace[-1].min()) > 1.0  # it really diverges

    counter = Counter(f)
    res = deq_core.solve(counter, z0, solver="broyden", max_iter=60, tol=1e-10, line_search=line_search)
    assert res.all_converged, res.summary()
    assert_consistent_stats(res, counter, 3, line_search=line_search)
    torch.testing.assert_close(res.z, exact, rtol=0, atol=1e-8)


@pytest.mark.parametrize("method", ["anderson", "broyden"])
def test_acceleration_beats_plain_iteration_on_slow_contraction(method):
    """Spectral radius 0.98: plain iteration needs ~900 steps for 1e-8; Anderson and Broyden need a few dozen."""
    q, _ = torch.linalg.qr(torch.randn(2, 6, 6, dtype=torch.float64))
    eig = torch.tensor([0.98, -0.9, 0.5, 0.95, 0.0, -0.3], dtype=torch.float64)
    mats = q @ torch.diag_embed(eig.expand(2, 6)) @ q.transpose(1, 2)
    bias = torch.randn(2, 6, dtype=torch.float64)
    f = affine_map(mats, bias)
    z0 = torch.zeros(2, 6, dtype=torch.float64)
    plain = deq_core.solve(f, z0, solver="fixed_point", max_iter=200, tol=1e-8)
    assert not bool(plain.converged.any())
    fast = deq_core.solve(f, z0, solver=method, max_iter=200, tol=1e-8)
    assert fast.all_converged and fast.iterations <= 40, fast.summary()


def test_anderson_converges_where_fixed_point_iteration_diverges():
    """On a linear problem Anderson with a long enough history acts like GMRES: it needs no contraction."""
    f, exact = _expanding_affine(3, 4)
    z0 = torch.zeros(3, 4, dtype=torch.float64)
    res = deq_core.solve(f, z0, solver="anderson", max_iter=60, tol=1e-10, m=8)
    assert res.all_converged, res.summary()
    torch.testing.assert_close(res.z, exact, rtol=0, atol=1e-8)


def test_broyden_line_search_counts_every_call():
    """z -> 2 - 2z: the full first Broyden step overshoots, so the line search backtracks (extra calls of f)."""
    counter = Counter(lambda z: 2.0 - 2.0 * z)
    z0 = torch.zeros(2, 3, dtype=torch.float64)
    res = deq_core.solve(counter, z0, solver="broyden", max_iter=30, tol=1e-10, line_search=True)
    assert res.all_converged
    assert res.nfe == counter.calls
    assert res.nfe > res.iterations  # backtracking happened and was counted
    torch.testing.assert_close(res.z, torch.full_like(z0, 2.0 / 3.0), rtol=0, atol=1e-9)

    plain = deq_core.solve(lambda z: 2.0 - 2.0 * z, z0, solver="fixed_point", max_iter=30, tol=1e-10)
    assert not bool(plain.converged.any())


# --------------------------------------------------------------------------------------------------------------
# 4. NaN / Inf produced by f
# --------------------------------------------------------------------------------------------------------------


def _nan_beyond(limit: float):
    """Sample 0: z -> 0.5 z + 1 (fixed point 2). Sample 1: z -> z + 1 (no fixed point; it walks to +inf).
    f is NaN wherever |z| > limit (a log of a negative number), as for a map leaving its domain."""
    slope = torch.tensor([[0.5], [1.0]], dtype=torch.float64)

    def f(z):
        return slope * z + 1.0 + 0.0 * torch.log(limit - z.abs())

    return f


@pytest.mark.parametrize("method", METHODS)
def test_nan_sample_is_flagged_and_others_converge(method):
    counter = Counter(_nan_beyond(5.0))
    z0 = torch.zeros(2, 3, dtype=torch.float64)
    res = deq_core.solve(counter, z0, solver=method, max_iter=40, tol=1e-9, stop_mode="abs")

    assert torch.isfinite(res.z).all()
    assert torch.isfinite(res.fz).all()
    assert res.nonfinite.tolist() == [False, True]
    assert res.converged.tolist() == [True, False]
    assert bool(torch.isfinite(res.residual[1]))  # the best finite iterate has a finite residual
    assert float(res.z[1].abs().max()) <= 5.0
    torch.testing.assert_close(res.z[0], torch.full((3,), 2.0, dtype=torch.float64), rtol=0, atol=1e-8)
    assert res.nfe == counter.calls
    assert "NaN" in res.summary()
    torch.testing.assert_close(res.residual, res.trace.min(0).values, rtol=0, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_nan_at_first_call_keeps_z0(method):
    def f(z):
        out = torch.cos(z)
        return torch.cat([out[:1], torch.full_like(out[1:], float("nan"))])

    z0 = torch.randn(2, 3, dtype=torch.float64)
    res = deq_core.solve(f, z0, solver=method, max_iter=100, tol=1e-10)
    assert res.nonfinite.tolist() == [False, True]
    assert res.converged.tolist() == [True, False]
    assert torch.equal(res.z[1], z0[1])
    assert math.isinf(float(res.residual[1]))
    assert torch.isfinite(res.z).all()


@pytest.mark.parametrize("method", METHODS)
def test_inf_is_treated_like_nan(method):
    slope = torch.tensor([[0.5], [1.0]], dtype=torch.float64)  # sample 1 (z -> z + 1) has no fixed point

    def f(z):
        return torch.where(z > 3.0, torch.full_like(z, float("inf")), slope * z + 1.0)

    z0 = torch.zeros(2, 2, dtype=torch.float64)
    res = deq_core.solve(f, z0, solver=method, max_iter=50, tol=1e-9, stop_mode="abs")
    assert res.nonfinite.tolist() == [False, True]
    assert res.converged.tolist() == [True, False]
    assert torch.isfinite(res.z).all()


def test_options_of_lists_defaults():
    assert deq_core.options_of("fixed_point") == {"damping": 1.0}
    assert set(deq_core.options_of("anderson")) == {"m", "beta", "reg"}
    assert set(deq_core.options_of("broyden")) == {"memory", "line_search", "ls_steps", "armijo"}


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("fixed_point", {"damping": 0.5}),
        ("anderson", {"m": 1}),
        ("anderson", {"m": 3, "beta": 0.5}),
        ("broyden", {"memory": 2}),
        ("broyden", {"line_search": True, "ls_steps": 5}),
    ],
)
def test_solver_options_still_converge(method, options):
    z0 = make_state("tuple", 2, torch.float64)
    dim = state_dim(z0)
    mats = random_contractions(2, dim, 0.6)
    bias = torch.randn(2, dim, dtype=torch.float64)
    res = deq_core.solve(affine_map(mats, bias), z0, solver=method, max_iter=400, tol=1e-9, **options)
    assert res.all_converged, res.summary()
    exact = torch.linalg.solve(torch.eye(dim, dtype=torch.float64) - mats, bias)
    torch.testing.assert_close(flat(res.z), exact, rtol=0, atol=1e-7)


def test_damping_changes_the_iteration():
    """damping=0.5 halves the step: the first step from 0 of z -> 0.5 z + 1 lands at 0.5 instead of 1."""
    seen = []

    def f(z):
        seen.append(z.clone())
        return 0.5 * z + 1.0

    deq_core.solve(f, torch.zeros(1, 1, dtype=torch.float64), solver="fixed_point", max_iter=2, damping=0.5)
    assert float(seen[1]) == 0.5


def test_unflat_helper_round_trip():
    """Sanity check of the test helper used by the affine maps."""
    z = make_state("tuple", 2, torch.float64)
    back = unflat(flat(z), z)
    assert all(torch.equal(a, b) for a, b in zip(back, z))


@pytest.mark.parametrize("method", METHODS)
def test_iterations_per_sample_do_not_depend_on_the_batch(method):
    """A sample's own convergence iteration is reported, whatever else is in the batch."""
    torch.manual_seed(0)
    slopes = torch.tensor([[0.1], [0.5], [0.9]], dtype=torch.float64)
    f = lambda z: slopes * z + 1.0  # per-sample contraction factors 0.1, 0.5, 0.9
    res = deq_core.solve(f, torch.zeros(3, 1, dtype=torch.float64), solver=method, max_iter=300, tol=1e-8)
    assert res.all_converged
    per = res.iterations_per_sample
    assert per.dtype == torch.int64 and per.shape == (3,)
    assert int(per.max()) == res.iterations
    for b in range(3):
        assert bool(res.trace[per[b] - 1, b] <= 1e-8)
        assert per[b] == 1 or bool(res.trace[per[b] - 2, b] > 1e-8)
        alone = deq_core.solve(lambda z, b=b: slopes[b : b + 1] * z + 1.0, torch.zeros(1, 1, dtype=torch.float64),
                               solver=method, max_iter=300, tol=1e-8)  # fmt: skip
        assert int(alone.iterations_per_sample[0]) == int(per[b])
    if method == "fixed_point":
        assert int(per[0]) < int(per[1]) < int(per[2])
