"""The DEQ-Transformer's f computes only what depends on z: the memory's projections, the position terms' constants and
the masks come from the segment's context. Checked against the attention written out from its definition (the memory
and z projected together, the injection added to the current segment's rows, the distance encodings projected and
gathered at the call, scores, mask, softmax), in float64, with and without memory and injection, post-LN and pre-LN,
in both forms of the attention ("gathered", "fused"), values and gradients; and in float32 at the copy-memory length
and through a backward pass that builds a graph (the Jacobian term)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor

from deq_core import frobenius_from_graph
from deq_lm.models.attention import RelativeAttention, fused_attention, relative_index
from deq_lm.models.transformer import DEQTransformerCell, TransformerBlock


def distance_encodings(k_len: int, d_model: int) -> Tensor:
    """Encodings of distances k_len - 1, ..., 0 in float64: [sin(d w), cos(d w)], w_i = 10000^(-2i/d_model)."""
    distances = torch.arange(k_len - 1, -1, -1, dtype=torch.float64)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    angles = distances[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def reference_attention(
    attn: RelativeAttention, z: Tensor, memory: Tensor | None, injection: Tensor | None,
    memory_injection: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """Transformer-XL attention from [memory; z], everything computed from scratch; the injection of [memory; z] is
    [memory_injection; injection] (zeros where None)."""
    batch, q_len, _ = z.shape
    cat = z if memory is None else torch.cat([memory, z], dim=1)
    k_len = cat.shape[1]
    pos = distance_encodings(k_len, attn.d_model).to(z.dtype)
    heads = attn.qkv(cat)
    if injection is not None:
        pad = heads.new_zeros(batch, k_len - q_len, heads.shape[-1]) if memory_injection is None else memory_injection
        heads = heads + torch.cat([pad, injection], dim=1)
    q, k, v = (t.reshape(batch, k_len, attn.n_heads, attn.d_head) for t in heads.chunk(3, dim=-1))
    q = q[:, -q_len:]
    r = attn.r_net(pos).reshape(k_len, attn.n_heads, attn.d_head)
    scale = 1.0 / math.sqrt(attn.d_head)
    content = torch.einsum("bihd,bjhd->bhij", (q + attn.r_w_bias) * scale, k)
    by_distance = torch.einsum("bihd,jhd->bhij", (q + attn.r_r_bias) * scale, r)
    index, future = relative_index(q_len, k_len, z.device)
    scores = content + by_distance.gather(3, index.expand(batch, attn.n_heads, q_len, k_len))
    scores = scores.masked_fill(future, float("-inf"))
    # as the model: the gathered form takes the softmax in float32 (also for float64), the fused kernel in the inputs'
    # dtype
    weights = torch.softmax(scores if attn.fused else scores.float(), dim=-1).to(v.dtype)
    return attn.out(torch.einsum("bhij,bjhd->bihd", weights, v).reshape(batch, q_len, -1))


def reference_block(
    block: TransformerBlock, z: Tensor, memory: Tensor | None, injection: Tensor | None,
    memory_injection: Tensor | None = None,
) -> Tensor:  # fmt: skip
    if block.pre_ln:
        mem = None if memory is None else block.ln1(memory)
        h = z + reference_attention(block.attn, block.ln1(z), mem, injection, memory_injection)
        normed = block.ln2(h)
        return (normed if block.residual_normalized else h) + block.ff2(torch.relu(block.ff1(normed)))
    h = block.ln1(z + reference_attention(block.attn, z, memory, injection, memory_injection))
    return block.ln2(h + block.ff2(torch.relu(block.ff1(h))))


@pytest.mark.parametrize("attention", ["gathered", "fused"])
@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("mem_len", [0, 5])
@pytest.mark.parametrize("inject", [False, True])
def test_f_with_the_segment_context_is_the_block(attention: str, pre_ln: bool, mem_len: int, inject: bool) -> None:
    torch.manual_seed(0)
    d, heads, d_head, batch, length = 16, 2, 8, 3, 7
    block = TransformerBlock(d, heads, d_head, 32, dropout=0.0, pre_ln=pre_ln, attention=attention).double()
    memory = torch.randn(batch, mem_len, d, dtype=torch.float64) if mem_len else None
    injection = torch.randn(batch, length, 3 * heads * d_head, dtype=torch.float64) if inject else None
    z = torch.randn(batch, length, d, dtype=torch.float64, requires_grad=True)

    ctx = block.context(memory, length, injection)
    outs = [block.step(z, ctx), block.step(z, ctx)]  # the context serves every call (as in a solve)
    ref = reference_block(block, z, memory, injection)
    for out in outs:
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    probe = torch.randn_like(ref)
    params = [z, *block.parameters()]
    grads = torch.autograd.grad((outs[0] * probe).sum() + (outs[1] * probe).sum(), params)
    ref_grads = torch.autograd.grad(2 * (ref * probe).sum(), params)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["gathered", "fused"])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_memory_keeps_the_injection_of_its_positions(attention: str, pre_ln: bool) -> None:
    """Two segments by hand, as the reference DEQ-Transformer computes the second: its keys and values over the
    sequence [z_1; z_2] are W [z_1; z_2] + U [x_1; x_2], the first segment's injection kept with its states."""
    torch.manual_seed(0)
    d_in, d, heads, d_head, batch, length = 6, 16, 2, 8, 3, 5
    cell = DEQTransformerCell(d_in, d, heads, d_head, 32, mem_len=length, pre_ln=pre_ln, weight_norm=False,
                              attention=attention).double()  # fmt: skip
    x1, x2 = (torch.randn(batch, length, d_in, dtype=torch.float64) for _ in range(2))
    z1, z2 = (torch.randn(batch, length, d, dtype=torch.float64) for _ in range(2))
    state = cell.next_state(z1, cell.setup(x1, None))  # the first segment's equilibrium z_1 becomes the memory
    out = cell.f(z2, cell.setup(x2, state))

    u1, u2 = cell.inject(x1), cell.inject(x2)
    expected = reference_block(cell.block, z2, z1, u2, memory_injection=u1)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    without = reference_block(cell.block, z2, z1, u2)  # the memory's keys and values from z_1 alone
    assert float((out - without).detach().abs().max()) > 1e-3
    memory, memory_injection = cell.next_state(z2, cell.setup(x2, state))
    assert torch.equal(memory, z2) and torch.equal(memory_injection, u2)


@pytest.mark.parametrize("attention", ["gathered", "fused"])
def test_float32_block_at_the_copy_memory_length(attention: str) -> None:
    """copy400's width (32) and sequence (420 positions), float32 against the float64 reference: the error bound is
    float32's rounding of the largest angle (420 rad), about K eps relative, for the values and the gradients."""
    torch.manual_seed(0)
    d, heads, d_head, batch, length = 32, 2, 16, 2, 420
    block = TransformerBlock(d, heads, d_head, 96, dropout=0.0, pre_ln=False, attention=attention)
    reference = copy.deepcopy(block).double()
    z = torch.randn(batch, length, d, requires_grad=True)
    injection = torch.randn(batch, length, 3 * heads * d_head)
    out = block.step(z, block.context(None, length, injection))
    z64 = z.detach().double().requires_grad_()
    ref = reference_block(reference, z64, None, injection.double())
    tol = length * torch.finfo(torch.float32).eps
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    probe = torch.randn(batch, length, d, dtype=torch.float64)
    grads = torch.autograd.grad((out * probe.float()).sum(), [z, *block.parameters()])
    ref_grads = torch.autograd.grad((ref * probe).sum(), [z64, *reference.parameters()])
    for g, r in zip(grads, ref_grads):
        scale = float(r.abs().max())
        torch.testing.assert_close(g.double(), r, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("mem_len", [0, 3])
def test_fused_attention_is_twice_differentiable(mem_len: int) -> None:
    """gradcheck and gradgradcheck (float64) of the fused attention: its backward is the kernel's, and a backward that
    builds a graph (the Jacobian term's) is differentiable again."""
    torch.manual_seed(0)
    q_len, k_len = 4, 4 + mem_len
    q = torch.randn(2, 2, q_len, 6, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, k_len, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    allowed = None if mem_len == 0 else ~relative_index(q_len, k_len, q.device)[1]

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return fused_attention(q, k, v, allowed, 0.4)

    assert torch.autograd.gradcheck(attention, (q, k, v))
    assert torch.autograd.gradgradcheck(attention, (q, k, v))


@pytest.mark.parametrize("mem_len", [0, 5])
def test_jacobian_term_of_the_fused_block(mem_len: int) -> None:
    """The Hutchinson estimate of ||J_f||_F^2 (a vector-Jacobian product with create_graph) and its gradient with
    respect to the block's parameters: fused block against the reference, same probes, float64."""
    torch.manual_seed(0)
    d, heads, d_head, batch, length = 16, 2, 8, 3, 7
    block = TransformerBlock(d, heads, d_head, 32, dropout=0.0, pre_ln=False, attention="fused").double()
    memory = torch.randn(batch, mem_len, d, dtype=torch.float64) if mem_len else None
    injection = torch.randn(batch, length, 3 * heads * d_head, dtype=torch.float64)
    z = torch.randn(batch, length, d, dtype=torch.float64, requires_grad=True)
    estimates = []
    for f in (lambda: block.step(z, block.context(memory, length, injection)),
              lambda: reference_block(block, z, memory, injection)):  # fmt: skip
        torch.manual_seed(1)  # the same probe for both
        estimate = frobenius_from_graph([f()], [z]).mean()
        grads = torch.autograd.grad(estimate, list(block.parameters()), allow_unused=True)  # biases of J-free terms
        estimates.append(
            (estimate, [torch.zeros_like(p) if g is None else g for g, p in zip(grads, block.parameters())])
        )
    (value, grads), (ref_value, ref_grads) = estimates
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-12)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
