"""The per-iteration bookkeeping of the solvers (``_solvers._run``): row selection by host-indexed copies (CPU) and by
torch.where (other devices) give identical results, on batches where samples converge, diverge and hit NaN at
different iterations."""

from __future__ import annotations

import pytest
import torch

import deq_core
from conftest import METHODS, Counter
from deq_core._solvers import _run


def _mixed_batch_map(batch: int, dim: int, seed: int = 0):
    """Per sample: contractions of different rates (converging at different iterations), one oscillating sample
    whose residual does not decrease every iteration, and samples 3 and 7 (mod 8) drifting (z + 1) to NaN beyond
    |z| = 4."""
    gen = torch.Generator().manual_seed(seed)
    rates = torch.linspace(0.3, 0.95, batch, dtype=torch.float64)
    rates[1::5] = -0.9  # oscillating, residual decreasing slowly
    target = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    blow_up = torch.zeros(batch, 1, dtype=torch.bool)
    blow_up[3::8] = True
    blow_up[7::8] = True

    def f(z):
        out = rates[:, None] * (z - target) + target + 0.05 * torch.sin(3 * z)
        out = torch.where(blow_up, z + 1.0, out)  # no fixed point: drifts until it hits NaN
        return torch.where(blow_up & (z.abs() > 4.0).any(dim=1, keepdim=True), torch.full_like(out, float("nan")), out)

    return f


def _solve_both(monkeypatch, method, batch, options=None):
    f = _mixed_batch_map(batch, 6)
    z0 = torch.zeros(batch, 6, dtype=torch.float64)
    out = []
    for rowwise in (True, False):
        monkeypatch.setattr(_run, "rowwise_copies", lambda t, rowwise=rowwise: rowwise)
        counter = Counter(f)
        res = deq_core.solve(counter, z0, solver=method, max_iter=60, tol=1e-8, stop_mode="abs", **(options or {}))
        assert res.nfe == counter.calls
        out.append(res)
    return out


@pytest.mark.parametrize("batch", [8, 40])  # 40: scattered rows, more runs than row-by-row copies handle
@pytest.mark.parametrize("method", METHODS)
def test_row_copies_and_where_give_identical_results(monkeypatch, method, batch):
    rows, where = _solve_both(monkeypatch, method, batch)
    for name in ("z", "fz", "residual", "converged", "nonfinite", "trace", "iterations_per_sample"):
        assert torch.equal(getattr(rows, name), getattr(where, name)), name
    assert rows.nfe == where.nfe and rows.iterations == where.iterations
    assert torch.isfinite(rows.z).all() and torch.isfinite(rows.fz).all()
    assert rows.nonfinite.any() and rows.converged.any() and not rows.converged.all()
    torch.testing.assert_close(rows.residual, rows.trace.min(dim=0).values, rtol=0, atol=0)


def test_broyden_line_search_rows_and_where_agree(monkeypatch):
    rows, where = _solve_both(monkeypatch, "broyden", 8, {"line_search": True})
    assert torch.equal(rows.z, where.z) and rows.nfe == where.nfe
    assert torch.equal(rows.trace, where.trace)


@pytest.mark.parametrize("rows", [[], [0], [2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 7], list(range(0, 40, 2)), [1, 5, 39]])
def test_copy_rows_matches_where(rows):
    dst = torch.randn(40, 5)
    src = torch.randn(40, 5)
    src[torch.tensor([i not in rows for i in range(40)])] = float("nan")  # rows not copied must not be read
    mask = torch.zeros(40, dtype=torch.bool)
    mask[rows] = True
    expected = torch.where(mask[:, None], src, dst)
    assert torch.equal(_run.copy_rows(dst.clone(), src, rows), expected)


def test_runs_groups_consecutive_rows():
    assert _run._runs([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 6), (7, 9)]
    assert _run._runs([]) == []


@pytest.mark.parametrize("method", METHODS)
def test_one_host_transfer_per_iteration(monkeypatch, method):
    """The loop condition and every per-sample decision come from one .tolist() of the flags per iteration."""
    calls = []
    original = torch.Tensor.tolist

    def counting_tolist(self):
        calls.append(tuple(self.shape))
        return original(self)

    f = _mixed_batch_map(8, 6)
    z0 = torch.zeros(8, 6, dtype=torch.float64)
    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    res = deq_core.solve(f, z0, solver=method, max_iter=30, tol=1e-8, stop_mode="abs")
    monkeypatch.undo()
    flags = [c for c in calls if c == (3, 8)]
    assert len(flags) == res.iterations
    # Broyden adds one (B,) transfer per update for the rows to zero on the CPU; nothing else syncs
    assert len(calls) - len(flags) <= (res.iterations if method == "broyden" else 0)


# --------------------------------------------------------------------------------------------------------------
# states_at: the best iterate after chosen iterations
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rowwise", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_states_at_are_the_best_iterates_of_shorter_solves(monkeypatch, method, rowwise):
    """On the mixed batch (samples converging at different iterations, one failing with NaN), the state kept after
    iteration i is the z of the same solve stopped at max_iter=i, for every sample; past the stop it is the z."""
    monkeypatch.setattr(_run, "rowwise_copies", lambda t: rowwise)
    f = _mixed_batch_map(8, 6)
    z0 = torch.zeros(8, 6, dtype=torch.float64)
    keep = (1, 2, 5, 13, 30, 60)
    res = deq_core.solve(f, z0, solver=method, max_iter=60, tol=1e-8, stop_mode="abs", states_at=keep)
    assert res.iterations > 13 and res.nonfinite.any() and res.converged.any()
    assert method == "fixed_point" or res.iterations < 30  # Anderson and Broyden stop before 30 and 60
    assert len(res.states) == len(keep) and torch.equal(res.states[0], z0)  # iteration 1 evaluates z0
    for state, i in zip(res.states, keep):
        shorter = deq_core.solve(f, z0, solver=method, max_iter=i, tol=1e-8, stop_mode="abs")
        assert torch.equal(state, shorter.z), i
    assert torch.equal(res.states[-1], res.z)


def test_states_at_keeps_the_structure_and_handles_an_empty_batch():
    f = lambda z: (0.5 * z[0] + 1.0, 0.5 * z[1] - 1.0)
    z0 = (torch.zeros(3, 2), torch.zeros(3, 4, 5))
    res = deq_core.solve(f, z0, solver="fixed_point", max_iter=20, tol=1e-6, states_at=[2])
    assert isinstance(res.states[0], tuple) and res.states[0][1].shape == (3, 4, 5)
    torch.testing.assert_close(res.states[0][0], torch.ones(3, 2))  # f(z0), the best of z0 and f(z0)
    assert deq_core.solve(f, z0, max_iter=20).states is None
    empty = deq_core.solve(f, (torch.zeros(0, 2), torch.zeros(0, 4, 5)), states_at=(2, 3))
    assert len(empty.states) == 2 and empty.states[1][1].shape == (0, 4, 5)


@pytest.mark.parametrize(
    ("states_at", "error"), [((0, 2), ValueError), ((3, 3), ValueError), ((21,), ValueError), (5, TypeError)]
)
def test_bad_states_at_raises(states_at, error):
    with pytest.raises(error, match="states_at must be strictly increasing ints in 1..max_iter=20"):
        deq_core.solve(torch.cos, torch.zeros(2, 3), max_iter=20, states_at=states_at)


@pytest.mark.parametrize("max_iter", [20, 200])
def test_states_at_keeps_state_sized_copies_whatever_max_iter(max_iter):
    """Peak memory of a solve grows by the kept copies (3 states here) and no more, at max_iter 20 or 200."""
    w = torch.randn(256, 256)
    w *= 0.999 / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(8, 256)
    f = lambda z: torch.tanh(z @ w.T + x)
    run = lambda **states: deq_core.solve(f, torch.zeros(8, 256), max_iter=max_iter, tol=1e-6, **states)
    plain, peak = deq_core.peak_live_bytes(run)
    kept, peak_kept = deq_core.peak_live_bytes(lambda: run(states_at=(3, 6, 9)))
    assert kept.iterations == plain.iterations > 9
    assert peak_kept - peak <= 3 * 8 * 256 * 4  # three float32 states
