"""A few optimizer steps lower the loss of every model (DEQ and explicit), on a fixed copy-memory batch."""

import pytest
import torch

from deq_core import Plan, use_plan
from deq_core.train.overrides import apply_overrides
from deq_lm.configs import MODELS, get_config
from deq_lm.configs.config import TRANSFORMERS
from deq_lm.data import copy_memory_batch, copy_memory_metrics
from deq_lm.models import build_model


@pytest.mark.parametrize("name, attention", [(m, "gathered") for m in MODELS] + [(m, "fused") for m in TRANSFORMERS])
def test_a_few_steps_lower_the_loss(name, attention):
    cfg = apply_overrides(get_config(f"tiny-{name.replace('_', '-')}"), [f"attention={attention}"])
    torch.manual_seed(0)
    model = build_model(cfg, 10).train()
    x, y = copy_memory_batch(16, cfg.data.T, torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_now() -> float:
        with torch.no_grad():
            return float(copy_memory_metrics(model.eval()(x).logits, y)[0])

    before = loss_now()
    for _ in range(12):
        model.train()
        loss, _ = copy_memory_metrics(model(x).logits, y)
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters()), "a parameter received no gradient"
        optimizer.step()
    after = loss_now()
    assert after < 0.85 * before, (before, after)


@pytest.mark.parametrize("attention", ["gathered", "fused"])
@pytest.mark.parametrize("mode", ["unroll", "jacobian", "jitter"])
def test_deq_training_features_reach_the_layer(mode, attention):
    cfg = apply_overrides(get_config("tiny-deq-transformer"), [f"attention={attention}"])
    torch.manual_seed(0)
    model = build_model(cfg, 10).train()
    x, y = copy_memory_batch(4, cfg.data.T, torch.Generator().manual_seed(0))
    plan = {"unroll": Plan(unroll=3), "jacobian": Plan(jacobian_loss=True), "jitter": Plan(max_iter=2)}[mode]
    with use_plan(model, plan):  # the one route of the per-step choices: the plan set on the model's DEQ layer
        out = model(x)
    if mode == "unroll":
        assert out.info.mode == "unrolled" and out.info.nfe == 3
    elif mode == "jacobian":
        assert out.info.jacobian_loss is not None and out.info.jacobian_loss > 0
        out.info.jacobian_loss.backward()  # differentiable w.r.t. the parameters
        assert model.body.cell.block.ff1.parametrizations.weight.original1.grad.abs().sum() > 0
    else:
        assert out.info.nfe <= 2
        loss, _ = copy_memory_metrics(out.logits, y)
        loss.backward()
        assert out.info.nfe_backward is not None and out.info.nfe_backward >= 1


def test_no_model_or_body_forward_takes_per_step_arguments():
    """A training step's choices reach the DEQ layer by its plan only (deq_core.use_plan): no forward on the way
    takes unroll / max_iter / jacobian_loss / a control object, and deq_lm.models no longer has Control."""
    import inspect

    import deq_lm.models as models

    per_step = {"unroll", "max_iter", "jacobian_loss", "control"}
    classes = [models.SequenceModel, models.DEQBody, models.UnrolledBody, models.TransformerXLBody, models.TCNBody,
               models.RecurrentBody]  # fmt: skip
    for cls in classes:
        assert not per_step & set(inspect.signature(cls.forward).parameters), cls
    assert not hasattr(models, "Control") and not hasattr(models.interface, "Control")
