"""The DEQ-Transformer's f computes only what depends on z: the memory's projections, the projected positions and the
masks come from the segment's context. Checked against the attention written out from its definition (the memory and
z projected together, the injection added to the current segment's rows, the positions projected at the call), in
float64, with and without memory and injection, post-LN and pre-LN, values and gradients."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from deq_lm.models.attention import RelativeAttention, relative_index
from deq_lm.models.transformer import TransformerBlock, distance_encodings


def reference_attention(attn: RelativeAttention, z: Tensor, memory: Tensor | None, pos: Tensor,
                        injection: Tensor | None) -> Tensor:  # fmt: skip
    """Transformer-XL attention from [memory; z], everything computed from scratch."""
    batch, q_len, _ = z.shape
    cat = z if memory is None else torch.cat([memory, z], dim=1)
    k_len = cat.shape[1]
    heads = attn.qkv(cat)
    if injection is not None:
        pad = heads.new_zeros(batch, k_len - q_len, heads.shape[-1])
        heads = heads + torch.cat([pad, injection], dim=1)
    q, k, v = (t.reshape(batch, k_len, attn.n_heads, attn.d_head) for t in heads.chunk(3, dim=-1))
    q = q[:, -q_len:]
    r = attn.r_net(pos).reshape(k_len, attn.n_heads, attn.d_head)
    scale = 1.0 / math.sqrt(attn.d_head)
    content = torch.einsum("bihd,bjhd->bhij", (q + attn.r_w_bias) * scale, k)
    by_distance = torch.einsum("bihd,jhd->bhij", (q + attn.r_r_bias) * scale, r)
    index, future = relative_index(q_len, k_len, z.device)
    scores = content + by_distance.gather(3, index.expand(batch, attn.n_heads, q_len, k_len))
    weights = torch.softmax(scores.masked_fill(future, float("-inf")).float(), dim=-1).to(v.dtype)  # as the model
    return attn.out(torch.einsum("bhij,bjhd->bihd", weights, v).reshape(batch, q_len, -1))


def reference_block(block: TransformerBlock, z: Tensor, memory: Tensor | None, pos: Tensor,
                    injection: Tensor | None) -> Tensor:  # fmt: skip
    if block.pre_ln:
        mem = None if memory is None else block.ln1(memory)
        h = z + reference_attention(block.attn, block.ln1(z), mem, pos, injection)
        return h + block.ff2(torch.relu(block.ff1(block.ln2(h))))
    h = block.ln1(z + reference_attention(block.attn, z, memory, pos, injection))
    return block.ln2(h + block.ff2(torch.relu(block.ff1(h))))


@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("mem_len", [0, 5])
@pytest.mark.parametrize("inject", [False, True])
def test_f_with_the_segment_context_is_the_block(pre_ln: bool, mem_len: int, inject: bool) -> None:
    torch.manual_seed(0)
    d, heads, d_head, batch, length = 16, 2, 8, 3, 7
    block = TransformerBlock(d, heads, d_head, 32, dropout=0.0, pre_ln=pre_ln).double()
    memory = torch.randn(batch, mem_len, d, dtype=torch.float64) if mem_len else None
    injection = torch.randn(batch, length, 3 * heads * d_head, dtype=torch.float64) if inject else None
    pos = distance_encodings(mem_len + length, d, torch.zeros((), dtype=torch.float64))
    z = torch.randn(batch, length, d, dtype=torch.float64, requires_grad=True)

    ctx = block.context(memory, pos, length, injection)
    outs = [block.step(z, ctx), block.step(z, ctx)]  # the context serves every call (as in a solve)
    ref = reference_block(block, z, memory, pos, injection)
    for out in outs:
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    probe = torch.randn_like(ref)
    params = [z, *block.parameters()]
    grads = torch.autograd.grad((outs[0] * probe).sum() + (outs[1] * probe).sum(), params)
    ref_grads = torch.autograd.grad(2 * (ref * probe).sum(), params)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
