"""The two references' blocks: the DEQ-Transformer cell follows locuslab/deq (LayerNorm without gain or bias, a bias on
the attention's output map, the pre-LN FFN adding back its normalized input, no final LayerNorm, dropout after the
FFN's ReLU with one mask per segment shared by every position); Transformer-XL follows kimiyoung/transformer-xl."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deq_lm.models.transformer import DEQTransformerCell, TransformerBlock, TransformerXLBody


def test_deq_cell_block_has_the_reference_parameters():
    cell = DEQTransformerCell(6, 16, 2, 8, 32, pre_ln=True, weight_norm=False)
    names = {name for name, _ in cell.named_parameters()}
    assert not any(".ln1." in n or ".ln2." in n for n in names)  # LayerNorm without gain or bias
    assert "block.attn.out.bias" in names
    assert not any("final_norm" in n for n in names)
    xl = TransformerXLBody(6, 16, 2, 8, 32, n_layers=1, pre_ln=True, weight_norm=False)
    xl_names = {name for name, _ in xl.named_parameters()}
    assert "blocks.0.ln1.weight" in xl_names and "blocks.0.attn.out.bias" not in xl_names


def test_weight_norm_leaves_the_injection_plain():
    cell = DEQTransformerCell(6, 16, 2, 8, 32, weight_norm=True)
    names = {name for name, _ in cell.named_parameters()}
    assert "inject.weight" in names  # not reparametrized
    assert any(n.startswith("block.ff1.parametrizations.weight") for n in names)


@pytest.mark.parametrize("pre_ln", [False, True])
def test_deq_block_step_is_the_reference_formula(pre_ln):
    """Written out with F.layer_norm (no affine), in float64, eval mode (no dropout)."""
    torch.manual_seed(0)
    d = 16
    block = TransformerBlock(d, 2, 8, 32, 0.0, pre_ln, conventions="deq_transformer").double().eval()
    z = torch.randn(3, 5, d, dtype=torch.float64)
    ctx = block.context(None, 5, None)

    def ln(t):
        return F.layer_norm(t, (d,))

    def ffn(t):
        return block.ff2(torch.relu(block.ff1(t)))

    if pre_ln:
        h = z + block.attn.attend(ln(z), ctx)
        expected = ln(h) + ffn(ln(h))
    else:
        h = ln(z + block.attn.attend(z, ctx))
        expected = ln(h + ffn(h))
    torch.testing.assert_close(block.step(z, ctx), expected, rtol=1e-12, atol=1e-12)


def test_dropout_masks_follow_each_reference():
    torch.manual_seed(0)
    like = torch.zeros(2, 7, 16)
    deq = TransformerBlock(16, 2, 8, 32, 0.5, False, conventions="deq_transformer").train()
    xl = TransformerBlock(16, 2, 8, 32, 0.5, False, conventions="transformer_xl").train()
    for block in (deq, xl):
        block.reset_masks(like)
    # one mask per segment shared by every position (DEQ), per element (Transformer-XL); the FFN's inner one too
    assert deq.drop_inner.mask.shape == (2, 1, 32) and deq.drop_ff.mask.shape == (2, 1, 16)
    assert xl.drop_inner.mask.shape == (2, 7, 32) and xl.drop_attn.mask.shape == (2, 7, 16)
    with pytest.raises(ValueError, match="conventions"):
        TransformerBlock(16, 2, 8, 32, 0.0, False, conventions="bert")
