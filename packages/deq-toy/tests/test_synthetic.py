"""The 1D data, the scalar DEQ and its layer, and the effect of the Jacobian regularizer."""

import sys

import pytest
import torch

from deq_core import DEQ, JFB, FixedPoint, Implicit, Phantom
from deq_core.train.run_config import replace_config
from deq_toy.configs import get_config, load_config
from deq_toy.data.synthetic import make_synthetic, target_function
from deq_toy.experiments.synthetic import SyntheticExperiment, equilibrium_statistics
from deq_toy.models import ScalarDEQ, build_scalar_model, paper_deq


def test_data_is_deterministic_and_noisy_around_h():
    a, b = make_synthetic(4096, 1000, 0.05, seed=0), make_synthetic(4096, 1000, 0.05, seed=0)
    assert torch.equal(a.x_train, b.x_train) and a.x_valid.shape == (1000, 1)
    assert a.x_train.min() >= -2 and a.x_train.max() <= 2
    noise = a.y_train - target_function(a.x_train)
    assert abs(float(noise.std()) - 0.05) < 0.005


def test_scalar_deq_has_200_parameters_and_exact_slope():
    torch.manual_seed(0)
    model = ScalarDEQ(width=50).double()
    assert sum(p.numel() for p in model.parameters()) == 200
    z, x = torch.randn(7, 1, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
    eps = 1e-6
    numeric = (model.f(z + eps, x) - model.f(z - eps, x)) / (2 * eps)
    assert torch.allclose(model.df_dz(z, x), numeric, atol=1e-6)
    z_star, info = model(x)
    assert z_star.shape == (7, 1) and bool(info.converged.all())
    assert torch.allclose(model.f(z_star, x), z_star, atol=1e-3)


def _train(gamma: float) -> SyntheticExperiment:
    config = replace_config(get_config("synthetic-tiny"), {"deq.jac_weight": gamma, "epochs": 6})
    torch.manual_seed(config.run.seed)
    experiment = SyntheticExperiment(config)
    opt = torch.optim.Adam(experiment.model.parameters(), lr=config.optim.lr)
    for step in range(experiment.total_steps):
        loss, _, _ = experiment.train_step(experiment.batch(step), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return experiment


def test_jacobian_regularization_flattens_f_at_equilibrium():
    plain, regularized = _train(0.0), _train(4.0)
    x = plain.data.x_valid
    slope_plain = equilibrium_statistics(plain.model, x, "broyden", 100, 1e-4)["dfdz"].mean()
    slope_reg = equilibrium_statistics(regularized.model, x, "broyden", 100, 1e-4)["dfdz"].mean()
    assert slope_reg < 0.7 * slope_plain


def test_training_steps_lower_the_loss():
    config = get_config("synthetic-tiny")
    torch.manual_seed(0)
    experiment = SyntheticExperiment(config)
    before = experiment.evaluate()["mse"]
    opt = torch.optim.Adam(experiment.model.parameters(), lr=config.optim.lr)
    for step in range(20):
        loss, _, _ = experiment.train_step(experiment.batch(step), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert experiment.evaluate()["mse"] < 0.7 * before


def test_synthetic_overrides_reach_the_scalar_deqs_layer():
    """The default config builds the paper's layer (paper_deq); ``backward=...`` overrides replace its backward mode
    and a training step still reaches W1 (the feedback weights, which only the backward through z* trains)."""
    assert build_scalar_model(get_config("synthetic-tiny")).deq.backward == paper_deq().backward
    for overrides, expected in (
        (["deq.backward=phantom", "deq.phantom_steps=2"], Phantom(steps=2, damping=0.5)),
        (["deq.backward=jfb"], JFB()),
        (
            ["deq.backward_stop_mode=rel", "deq.backward_tol=1e-4"],
            Implicit("broyden", max_iter=50, tol=1e-4, stop_mode="rel"),
        ),
    ):
        config = load_config("synthetic-tiny", overrides)
        torch.manual_seed(0)
        experiment = SyntheticExperiment(config)
        assert experiment.model.deq.backward == expected
        loss, _, _ = experiment.train_step(experiment.batch(0), 0)
        loss.backward()
        assert experiment.model.w1.grad is not None and float(experiment.model.w1.grad.abs().sum()) > 0, overrides
    layer = DEQ(solver="anderson", max_iter=30, tol=1e-6, stop_mode="abs", backward="jfb")
    model = ScalarDEQ(width=8, deq=layer)
    assert model.deq is layer and bool(model(torch.randn(5, 1))[1].converged.all())


def test_eval_solver_takes_what_deq_solver_takes(tmp_path, monkeypatch):
    """run.eval_solver names a solver as deq.solver does: a built-in's shorthand or a user's import path (the
    statistics are keyed by that name); an unknown name is refused naming the field and the built-ins."""
    from deq_core.train.errors import UsageError
    from deq_core.train.testing.faults import TRUSTED_SOLVER_MODULE

    (tmp_path / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_solvers", raising=False)
    torch.manual_seed(0)
    experiment = SyntheticExperiment(load_config("synthetic-tiny", ["eval_solver=my_solvers:Relaxed"]))
    result = experiment.evaluate()
    damped = equilibrium_statistics(experiment.model, experiment.data.x_valid, FixedPoint(damping=0.9), 100, 1e-3)
    assert result["nfe_my_solvers:Relaxed_mean"] == float(damped["nfe"].float().mean())  # Relaxed: damping 0.9
    assert result["converged_my_solvers:Relaxed"] == float(damped["converged"].float().mean())
    with pytest.raises(UsageError) as info:
        load_config("synthetic-tiny", ["eval_solver=newton"])
    assert "run.eval_solver: unknown solver 'newton'; choose one of ['anderson', 'broyden', 'fixed_point']" in str(
        info.value
    )
