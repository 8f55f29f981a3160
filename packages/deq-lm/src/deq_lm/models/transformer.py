"""The DEQ-Transformer cell and the explicit Transformer-XL stack.

One block (post-LN default)::

    h   = LN1(z + drop(Attn([mem; z], injection)))         pre-LN: h   = z + drop(Attn(LN1([mem; z]), injection))
    out = LN2(h + FFN(h))                                           out = r + FFN(LN2(h))
    FFN(h) = drop(W2 drop(ReLU(W1 h)))

In the pre-LN block r is h for Transformer-XL and LN2(h) for the reference DEQ-Transformer; the two references also
differ in their LayerNorms, dropout masks and the attention's output bias (:class:`TransformerBlock`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from deq_core import VariationalDropout

from .attention import AttentionContext, RelativeAttention
from .common import apply_weight_norm
from .interface import BodyOutput

BlockConventions = Literal["transformer_xl", "deq_transformer"]


class TransformerBlock(nn.Module):
    """Relative-attention block with a 2-layer position-wise FFN.

    Args:
        d_model, n_heads, d_head, d_ff: widths.
        dropout: dropout on the attention output, after the FFN's ReLU and on the FFN output.
        pre_ln: LayerNorm before each sublayer instead of after the residual sum.
        attention: "gathered" or "fused", how the attention computes its scores (the same function, see
            :mod:`deq_lm.models.attention`).
        conventions: whose block this is, where the two references differ:

            - "transformer_xl" (kimiyoung/transformer-xl): LayerNorms with gain and bias, no bias on the attention's
              output map, dropout masks drawn per element, and the pre-LN FFN adds back its raw input.
            - "deq_transformer" (locuslab/deq): LayerNorms without gain or bias, a bias on the attention's output
              map, variational dropout (one mask per segment, shared by every position and every call of f), and
              the pre-LN FFN adds back its normalized input.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        d_ff: int,
        dropout: float,
        pre_ln: bool,
        attention: str = "gathered",
        conventions: BlockConventions = "transformer_xl",
    ) -> None:
        super().__init__()
        if conventions not in typing.get_args(BlockConventions):
            raise ValueError(f"conventions must be one of {typing.get_args(BlockConventions)}, got {conventions!r}.")
        deq = conventions == "deq_transformer"
        self.pre_ln = pre_ln
        self.residual_normalized = deq
        self.attn = RelativeAttention(d_model, n_heads, d_head, attention, out_bias=deq)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.ln1 = nn.LayerNorm(d_model, elementwise_affine=not deq)
        self.ln2 = nn.LayerNorm(d_model, elementwise_affine=not deq)
        shared = (1,) if deq else ()  # the sequence dim: one mask value for every position
        self.drop_attn = VariationalDropout(dropout, shared_dims=shared)
        self.drop_inner = VariationalDropout(dropout, shared_dims=shared)
        self.drop_ff = VariationalDropout(dropout, shared_dims=shared)
        self.d_ff = d_ff

    def reset_masks(self, like: Tensor) -> None:
        """New dropout masks for states shaped like ``like`` (B, L, d_model); once per segment."""
        self.drop_attn.reset_mask(like)
        self.drop_inner.reset_mask(like.new_empty(*like.shape[:-1], self.d_ff))
        self.drop_ff.reset_mask(like)

    def context(
        self, memory: Tensor | None, q_len: int, injection: Tensor | None, memory_injection: Tensor | None = None
    ) -> AttentionContext:
        """What the block's attention computes once per segment (memory (B, M, d_model) or None, ``q_len`` = L,
        injection or None, the memory's own injection or None; see :meth:`RelativeAttention.context`): the DEQ's f
        reuses it at every call."""
        mem = None if memory is None or not self.pre_ln else self.ln1(memory)
        return self.attn.context(memory if mem is None else mem, q_len, injection, memory_injection)

    def step(self, z: Tensor, ctx: AttentionContext) -> Tensor:
        """z: (B, L, d_model) -> (B, L, d_model) with the segment's attention context."""
        if self.pre_ln:
            h = z + self.drop_attn(self.attn.attend(self.ln1(z), ctx))
            normed = self.ln2(h)
            return (normed if self.residual_normalized else h) + self._ffn(normed)
        h = self.ln1(z + self.drop_attn(self.attn.attend(z, ctx)))
        return self.ln2(h + self._ffn(h))

    def _ffn(self, h: Tensor) -> Tensor:
        return self.drop_ff(self.ff2(self.drop_inner(torch.relu(self.ff1(h)))))

    def forward(self, z: Tensor, memory: Tensor | None, injection: Tensor | None = None) -> Tensor:
        """z: (B, L, d_model); memory: (B, M, d_model) or None. Returns (B, L, d_model)."""
        return self.step(z, self.context(memory, z.shape[1], injection))


def extend_memory(memory: Tensor | None, z: Tensor, mem_len: int) -> Tensor:
    """The last ``mem_len`` positions of [memory; z] along the sequence, detached: (B, <= mem_len, width)."""
    cat = z if memory is None else torch.cat([memory, z], dim=1)
    return cat[:, -mem_len:].detach()


@dataclass
class TransformerContext:
    """What the DEQ-Transformer cell computes once per segment."""

    injection: Tensor  # (B, L, 3 H dh)
    memory: Tensor | None  # (B, M, d_model)
    memory_injection: Tensor | None  # (B, M, 3 H dh): the injection of the memory's positions
    shape: tuple[int, int, int]  # (B, L, d_model)
    attention: AttentionContext  # the memory's projections, the position terms' constants and the masks


class DEQTransformerCell(nn.Module):
    """f(z; x, mem) = Block(z | [mem; z], injection U [x_mem; x] added to Q, K, V).

    As in the reference DEQ-Transformer, the memory keeps the injection of its positions beside their states: the
    memory's keys and values are W [mem] + U x_mem, as they were when those positions were the current segment. The
    block follows the reference's conventions (``TransformerBlock(conventions="deq_transformer")``) and the output is
    z itself, with no final LayerNorm after a pre-LN block.

    Args:
        d_in: width of the embedded input.
        d_model, n_heads, d_head, d_ff, dropout, pre_ln: of the block.
        mem_len: number of past equilibrium states kept as memory for the next segment (0: none).
        weight_norm: weight-normalize every linear map.
        attention: "gathered" or "fused" (:class:`TransformerBlock`).

    State: z (B, L, d_model); segment state: None or the pair (memory (B, M, d_model), its injection
    (B, M, 3 H dh)), M <= mem_len.
    """

    def __init__(
        self,
        d_in: int,
        d_model: int,
        n_heads: int,
        d_head: int,
        d_ff: int,
        mem_len: int = 0,
        dropout: float = 0.0,
        pre_ln: bool = False,
        weight_norm: bool = True,
        attention: str = "gathered",
    ) -> None:
        super().__init__()
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}.")
        self.d_model, self.mem_len = d_model, mem_len
        self.inject = nn.Linear(d_in, 3 * n_heads * d_head)
        self.block = TransformerBlock(d_model, n_heads, d_head, d_ff, dropout, pre_ln, attention, "deq_transformer")
        if weight_norm:  # the block's maps; the injection keeps plain weights, as in the reference
            apply_weight_norm(self.block)

    def setup(self, x: Tensor, state: Any) -> TransformerContext:
        memory, memory_injection = (None, None) if state is None else state
        batch, length, _ = x.shape
        injection = self.inject(x)
        like = injection.new_zeros(batch, length, self.d_model)
        self.block.reset_masks(like)
        attention = self.block.context(memory, length, injection, memory_injection)
        return TransformerContext(injection, memory, memory_injection, (batch, length, self.d_model), attention)

    def initial(self, ctx: TransformerContext) -> Tensor:
        return ctx.injection.new_zeros(ctx.shape)

    def f(self, z: Tensor, ctx: TransformerContext) -> Tensor:
        """The equilibrium map: only what depends on z is computed here (the segment's part is in ``ctx``)."""
        return self.block.step(z, ctx.attention)

    def readout(self, z: Tensor, ctx: TransformerContext) -> Tensor:
        return z

    def next_state(self, z: Tensor, ctx: TransformerContext) -> tuple[Tensor, Tensor] | None:
        """The memory of the next segment: the last ``mem_len`` states and their injections (detached)."""
        if self.mem_len == 0:
            return None
        return (
            extend_memory(ctx.memory, z, self.mem_len),
            extend_memory(ctx.memory_injection, ctx.injection, self.mem_len),
        )


class TransformerXLBody(nn.Module):
    """Explicit L-layer Transformer-XL with untied layers: z_0 = P x, z_{i+1} = Block_i(z_i | [mem_i; z_i]).

    Arguments as :class:`DEQTransformerCell`'s, and ``n_layers``. Segment state: a list of L memories (the inputs of
    each layer, detached), or None.
    """

    def __init__(
        self,
        d_in: int,
        d_model: int,
        n_heads: int,
        d_head: int,
        d_ff: int,
        n_layers: int,
        mem_len: int = 0,
        dropout: float = 0.0,
        pre_ln: bool = False,
        weight_norm: bool = True,
        attention: str = "gathered",
    ) -> None:
        super().__init__()
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}.")
        self.d_model, self.mem_len = d_model, mem_len
        self.project = nn.Linear(d_in, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_head, d_ff, dropout, pre_ln, attention) for _ in range(n_layers)
        )
        self.final_norm: nn.Module = nn.LayerNorm(d_model) if pre_ln else nn.Identity()
        if weight_norm:
            apply_weight_norm(self)

    def forward(self, x: Tensor, state: Any = None) -> BodyOutput:
        """x: (B, L, d_in) -> hidden (B, L, d_model)."""
        memories = state if state is not None else [None] * len(self.blocks)
        z = self.project(x)
        new_memories = []
        for block, memory in zip(self.blocks, memories):
            block.reset_masks(z)
            if self.mem_len > 0:
                new_memories.append(extend_memory(memory, z, self.mem_len))
            z = block(z, memory)
        return BodyOutput(self.final_norm(z), new_memories if self.mem_len > 0 else None, None)
