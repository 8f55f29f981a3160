"""The per-iteration bookkeeping of the solvers (``_solvers._run``), kept on the device between host checks: the check
interval changes no result, NaN stays in the rows of the sample that produced it and never reaches f, and the host
reads the device once per check; on batches where samples converge, diverge and hit NaN at different iterations."""

from __future__ import annotations

import pytest
import torch

import deq_core
from conftest import METHODS, Counter


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


def _solve(method, batch, check_every, options=None, f=None):
    f = f or _mixed_batch_map(batch, 6)
    counter = Counter(f)
    z0 = torch.zeros(batch, 6, dtype=torch.float64)
    res = deq_core.solve(counter, z0, solver=method, max_iter=60, tol=1e-8, stop_mode="abs", check_every=check_every,
                         **(options or {}))  # fmt: skip
    assert res.nfe == counter.calls and res.check_every == check_every
    return res


@pytest.mark.parametrize("check_every", [3, 4, 7])
@pytest.mark.parametrize("method", METHODS)
def test_checking_less_often_changes_no_result(method, check_every):
    """On a batch whose samples converge, oscillate and hit NaN at different iterations, checking every 3, 4 or 7
    iterations gives the results of checking every iteration: the same z, f(z), residuals, flags and per-sample
    iterations of the converged samples (the others report the solve's iterations); the solve only runs on, by fewer
    than check_every iterations, to the first check after its last sample finished, and those iterations evaluate every
    sample at its best iterate (their trace rows are its residual)."""
    every = _solve(method, 8, 1)
    fewer = _solve(method, 8, check_every)
    for name in ("z", "fz", "residual", "converged", "nonfinite"):
        assert torch.equal(getattr(fewer, name), getattr(every, name)), name
    done = every.converged
    assert torch.equal(fewer.iterations_per_sample[done], every.iterations_per_sample[done])
    assert bool((fewer.iterations_per_sample[~done] == fewer.iterations).all())
    assert every.nonfinite.any() and every.converged.any() and not every.converged.all()
    assert torch.isfinite(every.z).all() and torch.isfinite(every.fz).all()
    assert method == "fixed_point" or every.iterations < 60  # Anderson and Broyden stop before the limit
    extra = fewer.iterations - every.iterations
    assert 0 <= extra < check_every and (fewer.iterations % check_every == 0 or fewer.iterations == 60)
    assert fewer.nfe - every.nfe == extra  # one call of f per iteration
    assert torch.equal(fewer.trace[: every.iterations], every.trace)
    assert bool((fewer.trace[every.iterations :] == every.residual).all())
    torch.testing.assert_close(every.residual, every.trace.min(dim=0).values, rtol=0, atol=0)


@pytest.mark.parametrize("check_every", [1, 4])
def test_broyden_line_search_under_both_intervals(check_every):
    every = _solve("broyden", 8, 1, {"line_search": True})
    fewer = _solve("broyden", 8, check_every, {"line_search": True})
    assert torch.equal(fewer.z, every.z) and torch.equal(fewer.converged, every.converged)
    assert torch.equal(fewer.trace[: every.iterations], every.trace)


@pytest.mark.parametrize("method", METHODS)
def test_f_never_sees_a_non_finite_input(method):
    """The samples that drift to NaN are frozen at their best finite iterate: f is never called with a NaN or Inf,
    whatever the solver proposed for them."""
    inner = _mixed_batch_map(8, 6)
    seen = []

    def f(z):
        seen.append(bool(torch.isfinite(z).all()))
        return inner(z)

    res = _solve(method, 8, 4, f=f)
    assert res.nonfinite.any() and all(seen) and len(seen) == res.nfe


@pytest.mark.parametrize("method", METHODS)
def test_a_failing_sample_changes_no_other_sample(method):
    """The other samples' results are those of the batch without the failing samples (3 and 7): no NaN crosses from
    one sample's rows to another's, in the loop or in a solver's history."""
    full = _solve(method, 8, 4)
    keep = torch.tensor([i not in (3, 7) for i in range(8)])
    inner = _mixed_batch_map(8, 6)

    def f_kept(z):  # the same map restricted to the kept samples (its per-sample constants indexed alike)
        out = torch.zeros(8, 6, dtype=z.dtype)
        out[keep] = z
        return inner(out)[keep]

    counter = Counter(f_kept)
    alone = deq_core.solve(counter, torch.zeros(6, 6, dtype=torch.float64), solver=method, max_iter=60, tol=1e-8,
                           stop_mode="abs", check_every=4)  # fmt: skip
    assert full.nonfinite[~keep].all() and not alone.nonfinite.any()
    for name in ("z", "fz", "residual", "converged", "iterations_per_sample"):
        torch.testing.assert_close(getattr(full, name)[keep], getattr(alone, name), rtol=1e-12, atol=1e-14, msg=name)


class _Reads:
    """Counts host reads of tensor values (tolist, item, bool, float, int) while installed."""

    NAMES = ("tolist", "item", "__bool__", "__float__", "__int__")

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        for name in self.NAMES:
            real = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counted(real))

    def _counted(self, real):
        def method(tensor, *args, **kwargs):
            self.count += 1
            return real(tensor, *args, **kwargs)

        return method


@pytest.mark.parametrize("check_every", [1, 4, 5])
@pytest.mark.parametrize("method", METHODS)
def test_the_host_reads_once_per_check(monkeypatch, method, check_every):
    """Reads of the device: one check that z0 is finite, then one per check_every iterations (none after the last
    iteration when it is max_iter's: the solve ends anyway)."""
    f = _mixed_batch_map(8, 6)
    z0 = torch.zeros(8, 6, dtype=torch.float64)
    reads = _Reads(monkeypatch)
    res = deq_core.solve(f, z0, solver=method, max_iter=60, tol=1e-8, stop_mode="abs", check_every=check_every)
    monkeypatch.undo()
    checks = res.iterations // check_every - (res.iterations == 60 and res.iterations % check_every == 0)
    assert reads.count == 1 + checks


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_bad_check_every_raises(bad):
    error = ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
    with pytest.raises(error, match="check_every must be an int >= 1 or None"):
        deq_core.solve(torch.cos, torch.zeros(2, 3), check_every=bad)


def test_check_every_defaults_to_one_on_the_cpu():
    assert deq_core.solve(torch.cos, torch.zeros(2, 3)).check_every == 1


# --------------------------------------------------------------------------------------------------------------
# states_at: the best iterate after chosen iterations
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check_every", [1, 4])
@pytest.mark.parametrize("method", METHODS)
def test_states_at_are_the_best_iterates_of_shorter_solves(method, check_every):
    """On the mixed batch (samples converging at different iterations, one failing with NaN), the state kept after
    iteration i is the z of the same solve stopped at max_iter=i, for every sample; past the stop it is the z."""
    f = _mixed_batch_map(8, 6)
    z0 = torch.zeros(8, 6, dtype=torch.float64)
    keep = (1, 2, 5, 13, 30, 60)
    res = deq_core.solve(f, z0, solver=method, max_iter=60, tol=1e-8, stop_mode="abs", states_at=keep,
                         check_every=check_every)  # fmt: skip
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


def test_the_layer_passes_its_intervals_to_both_solves():
    """DEQ(check_every=...) sets the forward solve's interval, Implicit(check_every=...) the adjoint solve's; the
    gradients are those of checking every iteration (only the calls made after the last sample finished differ)."""
    torch.manual_seed(0)
    w = (0.5 * torch.randn(6, 6, dtype=torch.float64) / 6**0.5).requires_grad_()
    x = torch.randn(5, 6, dtype=torch.float64)
    grads, infos = [], []
    for every in (1, 4):
        backward = deq_core.Implicit("broyden", max_iter=40, tol=1e-10, check_every=every)
        deq = deq_core.DEQ("anderson", max_iter=40, tol=1e-10, check_every=every, backward=backward)
        z, info = deq(lambda z: torch.tanh(z @ w.T + x), torch.zeros(5, 6, dtype=torch.float64))
        (grad,) = torch.autograd.grad(z.square().sum(), w)
        grads.append(grad)
        infos.append(info)
    assert infos[1].forward.check_every == 4 and infos[1].backward.check_every == 4
    assert infos[0].forward.check_every == 1 and infos[0].backward.check_every == 1
    assert infos[1].nfe >= infos[0].nfe and infos[1].nfe_backward >= infos[0].nfe_backward
    assert torch.equal(grads[1], grads[0])
    with pytest.raises(ValueError, match="check_every must be an int >= 1 or None"):
        deq_core.DEQ(check_every=0)
    with pytest.raises(TypeError, match="check_every must be an int >= 1 or None"):
        deq_core.Implicit(check_every=1.5)
