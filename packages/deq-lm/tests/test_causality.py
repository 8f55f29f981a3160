"""The output at position t must not depend on inputs after t, for every cell and baseline."""

import pytest
import torch

from conftest import strengthen_injection
from deq_core.train.run_config import replace_config
from deq_lm.configs import MODELS, get_config
from deq_lm.models import build_model

TINY = {name: f"tiny-{name.replace('_', '-')}" for name in MODELS}


def _model(name: str, **changes):
    cfg = get_config(TINY[name])
    # DEQs: solve (almost) exactly, so that the solver's stopping point does not blur the comparison.
    cfg = replace_config(cfg, {"deq.eval_max_iter": 300, "deq.eval_tol": 1e-11, "deq.solver": "anderson", **changes})
    torch.manual_seed(0)
    model = build_model(cfg, 10).double().eval()
    if name == "deq_transformer":
        strengthen_injection(model.body.cell)  # a cell whose fixed point the solver reaches to 1e-11
    return model, cfg


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("t", [0, 7, 15])
def test_future_inputs_do_not_change_past_outputs(name, t):
    model, _ = _model(name)
    gen = torch.Generator().manual_seed(t)
    x = torch.randint(0, 10, (3, 20), generator=gen)
    x2 = x.clone()
    x2[:, t + 1 :] = torch.randint(0, 10, (3, 20 - t - 1), generator=gen)
    with torch.no_grad():
        a, b = model(x).logits, model(x2).logits
    assert torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-5, rtol=0), (a[:, : t + 1] - b[:, : t + 1]).abs().max()
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-4)  # the change is visible later: not a no-op


@pytest.mark.parametrize(
    "name", ["deq_transformer", "transformer_xl", "transformer_tied", "deq_trellisnet", "trellisnet"]
)
def test_causal_with_memory_from_a_previous_segment(name):
    model, _ = _model(name, mem_len=5)
    gen = torch.Generator().manual_seed(0)
    first = torch.randint(0, 10, (2, 8), generator=gen)
    x = torch.randint(0, 10, (2, 9), generator=gen)
    x2 = x.clone()
    x2[:, 4:] = (x2[:, 4:] + 3) % 10
    with torch.no_grad():
        state = model(first).state
        assert state is not None
        a, b = model(x, state).logits, model(x2, state).logits
        fresh = model(x).logits
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-5, rtol=0)
    assert not torch.allclose(a[:, :4], fresh[:, :4], atol=1e-4)  # the memory is used


@pytest.mark.parametrize("name", ["deq_transformer", "deq_trellisnet"])
def test_cell_map_is_causal_in_z(name):
    """f(z; x) at position t reads z only at positions <= t (so the fixed point is causal, not just the solver)."""
    model, _ = _model(name)
    cell = model.body.cell
    x = torch.randint(0, 10, (2, 12))
    ctx = cell.setup(model.embed(x), None)
    z = torch.randn_like(cell.initial(ctx))
    z2 = z.clone()
    z2[:, 6:] += 1.0
    with torch.no_grad():
        a, b = cell.f(z, ctx), cell.f(z2, ctx)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-12, rtol=0)
    assert not torch.allclose(a[:, 6:], b[:, 6:])
