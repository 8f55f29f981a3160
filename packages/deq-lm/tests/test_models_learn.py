"""A few optimizer steps lower the loss of every model (DEQ and explicit), on a fixed copy-memory batch."""

import pytest
import torch

from deq_lm.configs import MODELS, get_config
from deq_lm.data import copy_memory_batch, copy_memory_metrics
from deq_lm.models import build_model


@pytest.mark.parametrize("name", MODELS)
def test_a_few_steps_lower_the_loss(name):
    cfg = get_config(f"tiny-{name.replace('_', '-')}")
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


@pytest.mark.parametrize("mode", ["unroll", "jacobian", "jitter"])
def test_deq_training_features_reach_the_layer(mode):
    cfg = get_config("tiny-deq-transformer")
    torch.manual_seed(0)
    model = build_model(cfg, 10).train()
    x, y = copy_memory_batch(4, cfg.data.T, torch.Generator().manual_seed(0))
    if mode == "unroll":
        out = model(x, unroll=3)
        assert out.info.mode == "unrolled" and out.info.nfe == 3
    elif mode == "jacobian":
        out = model(x, jacobian_loss=True)
        assert out.info.jacobian_loss is not None and out.info.jacobian_loss > 0
        out.info.jacobian_loss.backward()  # differentiable w.r.t. the parameters
        assert model.body.cell.block.ff1.parametrizations.weight.original1.grad.abs().sum() > 0
    else:
        out = model(x, max_iter=2)
        assert out.info.nfe <= 2
        loss, _ = copy_memory_metrics(out.logits, y)
        loss.backward()
        assert out.info.nfe_backward is not None and out.info.nfe_backward >= 1
