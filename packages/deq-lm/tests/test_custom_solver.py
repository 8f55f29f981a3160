"""A user's solver, named in the config by import path (``deq.solver=test_custom_solver:Relaxed``), runs the DEQ's
forward and implicit backward with no edit inside deq-core or deq-lm, and gives the same equilibrium and gradients as
the built-in solvers."""

import dataclasses

import pytest
import torch

import deq_core
from deq_core.train.overrides import apply_overrides
from deq_lm.configs import get_config
from deq_lm.models import build_model


@dataclasses.dataclass(frozen=True)
class Relaxed(deq_core.Solver):
    """z <- z + damping (f(z) - z), written only against deq-core's public protocol."""

    damping: float = 0.5

    def __post_init__(self):
        if not 0 < self.damping <= 1:
            raise ValueError(f"Relaxed: damping must be in (0, 1], got {self.damping}.")

    def init(self, z, fz, g, loop):
        return None

    def step(self, state, z, fz, g, loop):
        return deq_core.Step(z + self.damping * g, state, temporary=True)


PATH = f"{__name__}:Relaxed"


def _model_and_grads(overrides: list[str]):
    limits = ["deq.max_iter=600", "deq.tol=1e-8", "deq.backward_max_iter=300", "deq.backward_tol=1e-11"]
    cfg = apply_overrides(get_config("tiny-deq-transformer"), [*limits, *overrides])
    torch.manual_seed(0)
    model = build_model(cfg, 10).double().train()
    x = torch.randint(0, 10, (2, 9), generator=torch.Generator().manual_seed(1))
    out = model(x)
    out.hidden.pow(2).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return model, out, grads


def test_solver_by_import_path_in_the_config_runs_forward_and_backward():
    model, out, grads = _model_and_grads(
        [f"deq.solver={PATH}", "deq.solver_options=damping=0.9", f"deq.backward_solver={PATH}"]
    )
    assert model.body.deq.solver == Relaxed(damping=0.9)
    assert model.body.deq.backward.solver == Relaxed()
    assert bool(out.info.converged.all()) and bool(out.info.converged_backward.all())
    _, ref_out, ref_grads = _model_and_grads(["deq.solver=anderson", "deq.backward_solver=broyden"])
    assert out.info.nfe > ref_out.info.nfe  # plain relaxation is slower than Anderson: it really ran
    torch.testing.assert_close(out.hidden, ref_out.hidden, rtol=0, atol=1e-7)  # residual floor ~1e-9 here
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-6, atol=1e-8, msg=name)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("deq.solver_options=damping=2.0", "solver_options: Relaxed: damping must be in (0, 1], got 2.0."),
        ("deq.solver_options=m=3", "solver_options: unknown option(s) ['m'] for solver"),
        ("deq.backward_solver=deq_core:solve", "backward_solver: solver 'deq_core:solve' is <function"),
    ],
)
def test_bad_custom_solver_settings_are_config_errors(override, message):
    with pytest.raises(ValueError) as err:
        apply_overrides(get_config("tiny-deq-transformer"), [f"deq.solver={PATH}", override])
    assert message in str(err.value)
