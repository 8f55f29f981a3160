"""Transformer-XL relative positional multi-head attention over [memory; z], with an optional input injection
added to the queries, keys and values (the DEQ-Transformer's way of feeding x into every call of f)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def sinusoid_positions(distances: Tensor, dim: int) -> Tensor:
    """Sinusoidal encodings of relative distances.

    Args:
        distances: (K,) float tensor of distances (Transformer-XL orders them K-1, ..., 0).
        dim: even embedding size.

    Returns:
        (K, dim): [sin(d w_i), cos(d w_i)] with w_i = 10000^(-2i/dim).
    """
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=distances.device) / dim))
    angles = distances.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_index(q_len: int, k_len: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Index into the distance table and the causal mask.

    Query i (absolute position M + i, with M = k_len - q_len memory slots) attends key j at distance
    M + i - j; the encodings are ordered by distance k_len - 1, ..., 0, so that distance sits at index
    (q_len - 1 - i) + j. Keys with j > M + i are in the future.

    Returns:
        index: (q_len, k_len) LongTensor, clamped to [0, k_len - 1] (future entries are masked anyway).
        future: (q_len, k_len) bool, True where the key is after the query.
    """
    i = torch.arange(q_len, device=device)[:, None]
    j = torch.arange(k_len, device=device)[None, :]
    index = (q_len - 1 - i + j).clamp(max=k_len - 1)
    future = j > (k_len - q_len) + i
    return index, future


@dataclass
class AttentionContext:
    """What the attention over [memory; z] computes once per segment, independent of z: the memory's projected queries,
    keys and values (B, M, 3 H dh) or None, the input injection added to z's (B, L, 3 H dh) or None, the projected
    distance encodings (K, H, dh), and the distance index and causal mask (L, K)."""

    memory_heads: Tensor | None
    injection: Tensor | None
    r: Tensor
    index: Tensor
    future: Tensor


class RelativeAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content bias u, position bias v).

    Args:
        d_model: model width.
        n_heads, d_head: heads and their width.

    A DEQ calls it many times per segment with the same memory and positions: :meth:`context` computes what does not
    depend on z once, :meth:`attend` the rest at each call (``forward`` does both).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        inner = n_heads * d_head
        self.qkv = nn.Linear(d_model, 3 * inner, bias=False)
        self.r_net = nn.Linear(d_model, inner, bias=False)
        self.out = nn.Linear(inner, d_model, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(n_heads, d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(n_heads, d_head))
        nn.init.normal_(self.r_w_bias, std=0.02)
        nn.init.normal_(self.r_r_bias, std=0.02)

    def context(self, memory: Tensor | None, pos: Tensor, q_len: int, injection: Tensor | None) -> AttentionContext:
        """The part of the attention that does not depend on z.

        Args:
            memory: (B, M, d_model) earlier positions, or None.
            pos: (M + L, d_model) sinusoidal encodings of distances M + L - 1, ..., 0.
            q_len: L, the positions of the current segment.
            injection: (B, L, 3 * n_heads * d_head) added to the queries, keys and values of the current segment.
        """
        k_len = pos.shape[0]
        memory_heads = None if memory is None else self.qkv(memory)  # (B, M, 3 H dh)
        r = self.r_net(pos).reshape(k_len, self.n_heads, self.d_head)
        index, future = relative_index(q_len, k_len, pos.device)
        return AttentionContext(memory_heads, injection, r, index, future)

    def forward(self, z: Tensor, memory: Tensor | None, pos: Tensor, injection: Tensor | None = None) -> Tensor:
        """Attend from z (B, L, d_model) to [memory; z], causally (arguments as in :meth:`context`); (B, L, d_model)."""
        return self.attend(z, self.context(memory, pos, z.shape[1], injection))

    def attend(self, z: Tensor, ctx: AttentionContext) -> Tensor:
        """z: (B, L, d_model) -> (B, L, d_model), attending to [memory; z] with the segment's ``ctx``."""
        batch, q_len, _ = z.shape
        heads = self.qkv(z)  # (B, L, 3 H dh)
        if ctx.injection is not None:
            heads = heads + ctx.injection
        if ctx.memory_heads is not None:
            heads = torch.cat([ctx.memory_heads, heads], dim=1)  # (B, K, 3 H dh)
        k_len = heads.shape[1]
        q, k, v = heads.chunk(3, dim=-1)
        q = q[:, -q_len:].reshape(batch, q_len, self.n_heads, self.d_head)
        k = k.reshape(batch, k_len, self.n_heads, self.d_head)
        v = v.reshape(batch, k_len, self.n_heads, self.d_head)

        scale = 1.0 / math.sqrt(self.d_head)
        content = torch.einsum("bihd,bjhd->bhij", (q + self.r_w_bias) * scale, k)
        by_distance = torch.einsum("bihd,jhd->bhij", (q + self.r_r_bias) * scale, ctx.r)  # (B, H, L, K) by distance
        position = by_distance.gather(3, ctx.index.expand(batch, self.n_heads, q_len, k_len))
        scores = (content + position).masked_fill_(ctx.future, float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        mixed = torch.einsum("bhij,bjhd->bihd", weights, v).reshape(batch, q_len, -1)
        return self.out(mixed)
