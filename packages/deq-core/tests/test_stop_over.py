"""The stopping rule ``stop_over``: "sample" (every sample's residual meets tol) against "batch" (the residual of the
whole batch, one norm over all samples, as the reference DEQ code stops)."""

from __future__ import annotations

import pytest
import torch

import deq_core
from conftest import METHODS
from deq_core import DEQ, Implicit
from deq_core.train.deq_config import DEQConfig

TOL = 1e-3


def _one_slow_sample(batch: int = 8, dim: int = 5):
    """f(z) = a * (z - b) + b per sample: sample 0 small (|b| ~ 1) and slow (a = 0.95), the others large (|b| ~ 100)
    and fast (a = 0.3). The batch's relative residual falls below TOL long before sample 0's does."""
    gen = torch.Generator().manual_seed(0)
    target = torch.randn(batch, dim, generator=gen, dtype=torch.float64) * 100.0
    target[0] /= 100.0
    rate = torch.full((batch, 1), 0.3, dtype=torch.float64)
    rate[0] = 0.95

    def f(z):
        return rate * (z - target) + target

    return f, torch.zeros(batch, dim, dtype=torch.float64)


def _batch_rel(z, fz):
    return float(torch.linalg.vector_norm(fz - z) / torch.linalg.vector_norm(fz))


def test_batch_rule_stops_where_the_batch_norm_meets_tol_and_sample_rule_runs_on():
    f, z0 = _one_slow_sample()
    # The reference: plain fixed-point iteration, stopped at the first iterate whose batch residual is <= TOL.
    z, expected = z0, None
    for k in range(1, 200):
        fz = f(z)
        if _batch_rel(z, fz) <= TOL:
            expected = k
            break
        z = fz
    assert expected is not None
    batch = deq_core.solve(f, z0, "fixed_point", max_iter=200, tol=TOL, stop_over="batch")
    assert batch.iterations == expected and batch.nfe == expected
    assert _batch_rel(batch.z, batch.fz) <= TOL
    assert float(batch.residual[0]) > TOL  # sample 0 on its own is still above tol ...
    assert bool(batch.converged.all()) and batch.stop_over == "batch"  # ... yet the batch met the rule
    assert batch.iterations_per_sample.tolist() == [expected] * 8
    assert "the batch's rel residual" in batch.summary()

    sample = deq_core.solve(f, z0, "fixed_point", max_iter=200, tol=TOL)
    assert sample.stop_over == "sample"
    assert sample.iterations > expected + 20  # runs on until sample 0 meets tol itself
    assert bool(sample.converged.all()) and float(sample.residual.max()) <= TOL
    assert int(sample.iterations_per_sample[1]) < int(sample.iterations_per_sample[0])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("stop_mode", ["rel", "abs"])
def test_every_solver_stops_on_the_batch_residual(method, stop_mode):
    f, z0 = _one_slow_sample()
    tol = TOL if stop_mode == "rel" else TOL * 100.0
    res = deq_core.solve(f, z0, method, max_iter=200, tol=tol, stop_mode=stop_mode, stop_over="batch")
    g = torch.linalg.vector_norm(res.fz - res.z)
    batch_residual = float(g / torch.linalg.vector_norm(res.fz)) if stop_mode == "rel" else float(g)
    assert res.iterations < 200 and bool(res.converged.all())
    assert batch_residual <= tol
    # The first iteration whose batch residual met tol is the last one: the solve stopped there.
    assert res.trace.shape[0] == res.iterations


def test_batch_rule_leaves_a_nonfinite_sample_out_and_reports_it():
    f0, z0 = _one_slow_sample()

    def f(z):
        out = f0(z)
        out[3] = float("nan")
        return out

    res = deq_core.solve(f, z0, "anderson", max_iter=100, tol=TOL, stop_over="batch")
    assert res.nonfinite.tolist() == [i == 3 for i in range(8)]
    assert res.converged.tolist() == [i != 3 for i in range(8)]
    assert res.iterations < 100


def test_bad_stop_over_is_refused():
    f, z0 = _one_slow_sample()
    with pytest.raises(ValueError, match="unknown stop_over 'all'"):
        deq_core.solve(f, z0, stop_over="all")
    with pytest.raises(ValueError, match="stop_over"):
        DEQ(stop_over="all")
    with pytest.raises(ValueError, match="stop_over"):
        Implicit(stop_over="all")
    with pytest.raises(ValueError, match="stop_over"):
        DEQConfig(stop_over="all")


def test_layer_and_its_backward_follow_the_batch_rule():
    f0, z0 = _one_slow_sample()
    scale = torch.ones(1, dtype=torch.float64, requires_grad=True)

    def f(z):
        return f0(z) * scale

    weight = torch.ones(8, 1, dtype=torch.float64)
    weight[0] = 1e-2  # sample 0's adjoint (slow: rate 0.95) small against the others' (fast) in the batch's norm
    iterations = {}
    for rule in ("sample", "batch"):
        layer = DEQ("fixed_point", max_iter=200, tol=TOL, stop_over=rule,
                    backward=Implicit("fixed_point", max_iter=200, tol=TOL, stop_over=rule))  # fmt: skip
        out, info = layer(f, z0)
        (out * weight).sum().backward()
        assert info.forward.stop_over == rule and info.backward.stop_over == rule
        iterations[rule] = (info.forward.iterations, info.backward.iterations)
    assert iterations["batch"][0] < iterations["sample"][0]
    assert iterations["batch"][1] < iterations["sample"][1]


def test_config_section_carries_the_rule_to_the_layer():
    layer = DEQConfig(stop_over="batch", backward_stop_over="batch").layer()
    assert layer.stop_over == "batch" and layer.backward.stop_over == "batch"
    default = DEQConfig().layer()
    assert default.stop_over == "sample" and default.backward.stop_over == "sample"
