"""Transformer-XL relative positional multi-head attention over [memory; z], with an optional input injection
added to the queries, keys and values (the DEQ-Transformer's way of feeding x into every call of f)."""

from __future__ import annotations

import math

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


class RelativeAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content bias u, position bias v).

    Args:
        d_model: model width.
        n_heads, d_head: heads and their width.
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

    def forward(self, z: Tensor, memory: Tensor | None, pos: Tensor, injection: Tensor | None = None) -> Tensor:
        """Attend from z to [memory; z], causally.

        Args:
            z: (B, L, d_model) current segment.
            memory: (B, M, d_model) earlier positions, or None.
            pos: (M + L, d_model) sinusoidal encodings of distances M + L - 1, ..., 0.
            injection: (B, L, 3 * n_heads * d_head) added to the queries, keys and values of the current segment.

        Returns:
            (B, L, d_model).
        """
        batch, q_len, _ = z.shape
        cat = z if memory is None else torch.cat([memory, z], dim=1)
        k_len = cat.shape[1]
        heads = self.qkv(cat)  # (B, K, 3 H dh)
        if injection is not None:
            pad = heads.new_zeros(batch, k_len - q_len, heads.shape[-1])
            heads = heads + torch.cat([pad, injection], dim=1)
        q, k, v = heads.chunk(3, dim=-1)
        q = q[:, -q_len:].reshape(batch, q_len, self.n_heads, self.d_head)
        k = k.reshape(batch, k_len, self.n_heads, self.d_head)
        v = v.reshape(batch, k_len, self.n_heads, self.d_head)
        r = self.r_net(pos).reshape(k_len, self.n_heads, self.d_head)

        scale = 1.0 / math.sqrt(self.d_head)
        content = torch.einsum("bihd,bjhd->bhij", (q + self.r_w_bias) * scale, k)
        by_distance = torch.einsum("bihd,jhd->bhij", (q + self.r_r_bias) * scale, r)  # (B, H, L, K) by distance slot
        index, future = relative_index(q_len, k_len, z.device)
        position = by_distance.gather(3, index.expand(batch, self.n_heads, q_len, k_len))
        scores = (content + position).masked_fill_(future, float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        mixed = torch.einsum("bhij,bjhd->bihd", weights, v).reshape(batch, q_len, -1)
        return self.out(mixed)
