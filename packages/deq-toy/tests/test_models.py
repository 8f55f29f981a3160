"""Forward shapes of every arithmetic model, that a few training steps lower the loss, and the GRU-DEQ's layer."""

import pytest
import torch

from deq_core import DEQ, JFB, Anderson, Broyden, Implicit, Phantom, Plan, use_plan
from deq_core.train.errors import UsageError
from deq_core.train.run_config import replace_config
from deq_toy.configs import get_config, load_config
from deq_toy.configs.arithmetic import MODELS
from deq_toy.experiments.arithmetic import ArithmeticExperiment
from deq_toy.models import GRUDEQ, any_length, build_arithmetic_model


@pytest.mark.parametrize("model_name", MODELS)
def test_forward_shapes(model_name):
    config = replace_config(get_config("arith-deq-tiny"), {"model": model_name})
    torch.manual_seed(0)
    model = build_arithmetic_model(config)
    tokens = torch.nn.functional.one_hot(torch.randint(0, 15, (5, 31)), 15).float()
    logits, info = model(tokens)
    assert logits.shape == (5,)
    if model_name in ("deq", "repeated_gru"):
        assert info is not None and info.residual.shape == (5,) and info.nfe >= 1
    else:
        assert info is None


def test_deq_jacobian_loss_and_last_readout_accepts_longer_inputs():
    config = replace_config(get_config("arith-deq-tiny"), {"model.readout": "last"})
    torch.manual_seed(0)
    model = build_arithmetic_model(config)
    assert any_length(model)
    tokens = torch.nn.functional.one_hot(torch.randint(0, 15, (3, 41)), 15).float()
    with use_plan(model, Plan(jacobian_loss=True)):
        logits, info = model(tokens)
    assert logits.shape == (3,) and info.jacobian_loss is not None and info.jacobian_loss.ndim == 0
    flat = build_arithmetic_model(get_config("arith-deq-tiny"))
    assert not any_length(flat)
    with pytest.raises(ValueError, match="readout=last"):
        flat(tokens)


@pytest.mark.parametrize(
    "name",
    [
        "arith-fc-tiny",
        "arith-gru-tiny",
        "arith-stacked-gru-tiny",
        "arith-repeated-gru-tiny",
        "arith-deq-tiny",
        "arith-deq-jac-tiny",
    ],
)
def test_few_steps_lower_the_loss_on_a_fixed_batch(name, tmp_path):
    config = replace_config(get_config(name), {"data.n_train": 64, "data.n_valid": 32})
    torch.manual_seed(0)
    experiment = ArithmeticExperiment(config, tmp_path)
    optimizer = torch.optim.Adam(experiment.model.parameters(), lr=3e-3)
    batch = experiment.batch(0)
    losses = []
    for step in range(12):
        loss, stats, info = experiment.train_step(batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(stats["bce"])
        if config.model.name == "deq":
            assert info.nfe_backward is not None  # the implicit backward ran
    assert losses[-1] < losses[0] - 0.02


def test_gru_deq_takes_a_layer_with_another_solver():
    """GRUDEQ(..., deq=layer) solves and differentiates with that layer (Broyden forward and backward, not the
    report's Anderson): the statistics come from it and the gradient reaches the cell's GRU and the injection."""
    torch.manual_seed(0)
    layer = DEQ(solver=Broyden(), max_iter=12, tol=1e-4, backward=Implicit(Broyden(), max_iter=12, tol=1e-4))
    model = GRUDEQ(15, 8, 31, deq=layer)
    assert model.deq is layer
    tokens = torch.nn.functional.one_hot(torch.randint(0, 15, (4, 31)), 15).float()
    logits, info = model(tokens)
    assert info.forward is not None and "broyden" in info.forward.summary()
    logits.sum().backward()
    assert info.nfe_backward is not None and info.nfe_backward >= 1  # Broyden's implicit backward ran
    for name, p in [*model.cell.named_parameters(), *model.inject.named_parameters()]:
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name
    default = GRUDEQ(15, 8, 31)
    assert default.deq.solver == Anderson(m=6) and default.deq.backward == Implicit(Anderson(m=6), 50, 1e-3)
    with pytest.raises(TypeError, match="deq must be a deq_core.DEQ layer"):
        GRUDEQ(15, 8, 31, deq="broyden")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], Implicit(Anderson(m=4), max_iter=7, tol=1e-4)),
        (["deq.backward=phantom", "deq.phantom_steps=3", "deq.phantom_damping=0.7"], Phantom(steps=3, damping=0.7)),
        (["deq.backward=jfb"], JFB()),
    ],
)
def test_arithmetic_overrides_reach_the_layer_and_train(overrides, expected, tmp_path):
    """``deq.backward=...`` overrides (as on the command line) set the GRU-DEQ's backward mode, ``deq.solver_options``
    its solver; one training step in each mode moves the cell's weights."""
    tiny = ["n_train=64", "n_valid=32", "n_test=32", "deq.solver_options=m=4", "deq.backward_options=m=4",
            "deq.backward_max_iter=7", "deq.backward_tol=1e-4"]  # fmt: skip
    config = load_config("arith-deq-tiny", [*tiny, *overrides])
    torch.manual_seed(0)
    experiment = ArithmeticExperiment(config, tmp_path)
    assert experiment.model.deq.solver == Anderson(m=4) and experiment.model.deq.backward == expected
    weight = experiment.model.cell.gru.weight_hh_l0
    before = weight.detach().clone()
    optimizer = torch.optim.Adam(experiment.model.parameters(), lr=1e-3)
    loss, _, info = experiment.train_step(experiment.batch(0), 0)
    loss.backward()
    optimizer.step()
    assert not torch.equal(weight, before)
    assert (info.nfe_backward is not None) == (expected == Implicit(Anderson(m=4), max_iter=7, tol=1e-4))


@pytest.mark.parametrize(
    "bad", ["deq.phantom_steps=0", "deq.phantom_damping=0", "deq.phantom_damping=2", "deq.backward=adjoint"]
)
def test_bad_backward_settings_raise(bad):
    with pytest.raises(UsageError, match=bad.split("=")[0]):
        load_config("arith-deq-tiny", [bad])
