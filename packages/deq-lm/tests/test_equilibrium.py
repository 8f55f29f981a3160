"""The DEQ's z* is the limit of its weight-tied network; dropout masks stay fixed within a solve."""

import pytest
import torch

from conftest import strengthen_injection
from deq_core import Plan, use_plan
from deq_core.train.run_config import replace_config
from deq_lm.configs import get_config
from deq_lm.models import UnrolledBody, build_model


def _deq(name: str, injection: float = 30.0, **changes):
    cfg = replace_config(get_config(name), {"deq.eval_max_iter": 400, "deq.eval_tol": 1e-10, **changes})
    torch.manual_seed(0)
    model = build_model(cfg, 10).double().eval()
    if cfg.model.name == "deq_transformer":
        strengthen_injection(model.body.cell, factor=injection)
    return model


def _unroll_until_converged(model, x, state=None, max_depth=2000):
    """Hidden states of the weight-tied network with the DEQ's own cell, deepened until two depths agree."""
    unrolled = UnrolledBody(model.body.cell, depth=1)
    emb = model.embed(x)
    previous = None
    depth = 8
    while depth <= max_depth:
        hidden = unrolled(emb, state, depth=depth).hidden
        if previous is not None and (hidden - previous).abs().max() < 1e-12:
            return hidden, depth
        previous, depth = hidden, depth * 2
    raise AssertionError(f"the weight-tied network did not converge within {max_depth} layers")


@pytest.mark.parametrize("name", ["tiny-deq-transformer", "tiny-deq-trellisnet"])
@pytest.mark.parametrize("solver", ["anderson", "broyden", "fixed_point"])
def test_deq_fixed_point_equals_unrolled_limit(name, solver):
    model = _deq(name, **{"deq.solver": solver, "deq.eval_tol": 1e-10})
    x = torch.randint(0, 10, (3, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(x)
        limit, depth = _unroll_until_converged(model, x)
        shallow = UnrolledBody(model.body.cell, depth=2)(model.embed(x)).hidden
    assert bool(out.info.converged.all()), out.info.residual
    assert torch.allclose(out.hidden, limit, atol=1e-7, rtol=0), (out.hidden - limit).abs().max()
    assert not torch.allclose(shallow, limit, atol=1e-3)  # a shallow network is not the equilibrium


def test_deq_transformer_with_memory_equals_unrolled_limit():
    # The comparison needs a contraction (one fixed point, reached by plain iteration). With a memory the cell's
    # attention sees more context and 30x the injection is not enough for every weight draw: torch 2.14's draw at
    # seed 0 left one sample cycling at 5e-8 (plain iteration) and, at 60x, two distinct fixed points; 100x contracts.
    model = _deq("tiny-deq-transformer", injection=100.0, mem_len=6)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        memory = model(torch.randint(0, 10, (2, 9), generator=gen)).state
        assert memory[0].shape == (2, 6, 8) and memory[1].shape == (2, 6, 24)  # states, their injections
        x = torch.randint(0, 10, (2, 7), generator=gen)
        out = model(x, memory)
        limit, _ = _unroll_until_converged(model, x, memory)
    assert torch.allclose(out.hidden, limit, atol=1e-7, rtol=0)


def test_explicit_tied_transformer_is_the_deq_cell_unrolled():
    """transformer_tied with n_layers = L computes exactly L applications of the DEQ-Transformer cell."""
    tied_cfg = get_config("tiny-transformer-tied")
    sizes = {f"model.{k}": getattr(tied_cfg.model, k) for k in ("d_model", "n_heads", "d_head", "d_ff")}
    deq_cfg = replace_config(get_config("tiny-deq-transformer"), sizes)
    torch.manual_seed(0)
    tied = build_model(tied_cfg, 10).eval()
    deq = build_model(deq_cfg, 10).eval()
    deq.load_state_dict(tied.state_dict(), strict=False)
    deq.body.cell.load_state_dict(tied.body.cell.state_dict())
    x = torch.randint(0, 10, (2, 10))
    with torch.no_grad():
        a = tied(x).logits
        with use_plan(deq, Plan(unroll=tied_cfg.model.n_layers)):
            b = deq(x).logits
    assert torch.allclose(a, b, atol=1e-6)


def test_variational_dropout_masks_fixed_within_a_solve():
    cfg = replace_config(get_config("tiny-deq-transformer"), {"model.dropout": 0.3})
    torch.manual_seed(0)
    model = build_model(cfg, 10).train()
    cell = model.body.cell
    x = model.embed(torch.randint(0, 10, (2, 9)))
    z = torch.randn(2, 9, cfg.model.d_model)
    with torch.no_grad():
        ctx = cell.setup(x, None)
        first, again = cell.f(z, ctx), cell.f(z, ctx)
        cell.setup(x, None)  # a new segment draws new masks
        other = cell.f(z, ctx)
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)
    mask = cell.block.drop_ff.mask
    assert mask.shape == (2, 1, cfg.model.d_model)  # shared over positions
    values = mask.unique()
    assert len(values) == 2 and values[0] == 0.0 and abs(float(values[1]) - 1 / 0.7) < 1e-6
