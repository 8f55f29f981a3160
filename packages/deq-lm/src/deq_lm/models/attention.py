"""Transformer-XL relative positional multi-head attention over [memory; z], with an optional input injection
added to the queries, keys and values (the DEQ-Transformer's way of feeding x into every call of f).

The score of query i (absolute position p_i = M + i, after M memory slots) and key j (position j) is

    ((q_i + u) . k_j + (q_i + v) . W_r s(p_i - j)) / sqrt(d_head),    s(d) = [sin(d w), cos(d w)] (d_model values)

for j <= p_i (later keys are masked). Two ways of computing it give the same function:

- ``attention="gathered"`` (Transformer-XL's, the default): project the encodings of every distance, score every
  query against every distance and gather each key's entry; several (B, H, L, K) tensors are written per call.
- ``attention="fused"``: by sin(a - b) = sin a cos b - cos a sin b and cos(a - b) = cos a cos b + sin a sin b, the
  position term is a dot product between a query feature a_i = W_r^T (q_i + v) turned by the angles of p_i
  (:func:`rotate_queries`) and the key feature [cos(j w), sin(j w)]. Appended to q_i + u and k_j, the whole score is
  one dot product of width d_head + d_model, so the attention is one ``scaled_dot_product_attention`` call (the
  values zero-padded to that width), whose fused kernel never writes the (B, H, L, K) scores.

Which is faster depends on the sizes: "fused" spends 2 (d_head + d_model) multiply-adds per query-key pair where
"gathered" spends 3 d_head, but writes no (B, H, L, K) tensor. On one CPU thread (results/profile_copy400.md), width
32 with 2 heads of 16 at 420 positions (``copy400-deq-transformer``): a call of f 4x, its vector-Jacobian product
2.4x, a training step 2.9x faster; at 120 positions about even; width 128 with 4 heads of 32 at 64 positions and 64
of memory (the pydoc presets): 1.3-1.8x slower.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..configs.config import AttentionForm

ATTENTION_FORMS: tuple[str, ...] = typing.get_args(AttentionForm)


def _angle_dtype(dtype: torch.dtype) -> torch.dtype:
    """Angles are computed in float64 for float64 models, else in float32 (then cast to the model's dtype)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def sinusoid_angles(positions: Tensor, dim: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """(sin, cos) of positions times the frequencies w_i = 10000^(-2i/dim), each (N, dim / 2), in ``dtype``.

    Args:
        positions: (N,) integer or float tensor.
        dim: even embedding size.
        dtype: of the result; the angles themselves are computed in float64 for float64, else in float32.
    """
    work = _angle_dtype(dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=work, device=positions.device) / dim))
    angles = positions.to(work)[:, None] * inv_freq[None, :]
    return angles.sin().to(dtype), angles.cos().to(dtype)


def sinusoid_positions(distances: Tensor, dim: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sinusoidal encodings of relative distances.

    Args:
        distances: (K,) tensor of distances (Transformer-XL orders them K-1, ..., 0).
        dim: even embedding size.
        dtype: of the result (angles in float64 for float64, else in float32).

    Returns:
        (K, dim): [sin(d w_i), cos(d w_i)] with w_i = 10000^(-2i/dim).
    """
    return torch.cat(sinusoid_angles(distances, dim, dtype), dim=-1)


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
class GatheredPositions:
    """The gathered form's segment constants: the projected encodings of distances K - 1, ..., 0 (K, H, dh), the
    index of each (query, key)'s distance and the causal mask (L, K)."""

    r: Tensor
    index: Tensor
    future: Tensor


@dataclass
class RotatedPositions:
    """The rotated form's segment constants: sin and cos of the queries' angles (L, d_model / 2), the keys'
    features [cos, sin] of their angles (K, d_model), and the keys each query may attend (L, K) bool, or None
    when K = L (plain causal)."""

    sin: Tensor
    cos: Tensor
    keys: Tensor
    allowed: Tensor | None


def rotated_positions(q_len: int, k_len: int, dim: int, dtype: torch.dtype, device: torch.device) -> RotatedPositions:
    """The rotated form's constants for L = ``q_len`` queries at positions K - L, ..., K - 1 and K = ``k_len``
    keys at positions 0, ..., K - 1 (encodings of width ``dim``)."""
    positions = torch.arange(k_len, device=device)
    sin_k, cos_k = sinusoid_angles(positions, dim, dtype)
    allowed = None
    if k_len != q_len:
        allowed = ~relative_index(q_len, k_len, device)[1]
    return RotatedPositions(sin_k[k_len - q_len :], cos_k[k_len - q_len :], torch.cat([cos_k, sin_k], -1), allowed)


def rotate_queries(a: Tensor, pos: RotatedPositions) -> Tensor:
    """Query features a (B, L, H, d_model), coefficients of [sin(d w), cos(d w)], turned by the queries' angles:
    their dot product with ``pos.keys[j]`` is a . s(p_i - j). Returns (B, L, H, d_model)."""
    alpha, beta = a.chunk(2, dim=-1)
    sin, cos = pos.sin[:, None, :].to(a.dtype), pos.cos[:, None, :].to(a.dtype)
    return torch.cat([alpha * sin + beta * cos, beta * sin - alpha * cos], dim=-1)


@dataclass
class AttentionContext:
    """What the attention over [memory; z] computes once per segment, independent of z: the memory's projected queries,
    keys and values (B, M, 3 H dh) or None, the input injection added to z's (B, L, 3 H dh) or None, and the position
    terms' constants (:class:`GatheredPositions` or :class:`RotatedPositions`)."""

    memory_heads: Tensor | None
    injection: Tensor | None
    positions: GatheredPositions | RotatedPositions


class RelativeAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content bias u, position bias v).

    Args:
        d_model: model width (and of the sinusoidal distance encodings).
        n_heads, d_head: heads and their width.
        attention: "gathered" or "fused", how the scores are computed (the same function; see the module docstring).
        out_bias: whether the output map has a bias (the reference DEQ-Transformer's has, Transformer-XL's not).

    A DEQ calls it many times per segment with the same memory and positions: :meth:`context` computes what does not
    depend on z once, :meth:`attend` the rest at each call (``forward`` does both). Attribute ``fused``: whether
    the fused form is used (read at each :meth:`context`).
    """

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, attention: str = "gathered", out_bias: bool = False
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_FORMS:
            raise ValueError(f"attention must be one of {list(ATTENTION_FORMS)}, got {attention!r}.")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.fused = attention == "fused"
        inner = n_heads * d_head
        self.qkv = nn.Linear(d_model, 3 * inner, bias=False)
        self.r_net = nn.Linear(d_model, inner, bias=False)
        self.out = nn.Linear(inner, d_model, bias=out_bias)
        self.r_w_bias = nn.Parameter(torch.zeros(n_heads, d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(n_heads, d_head))
        nn.init.normal_(self.r_w_bias, std=0.02)
        nn.init.normal_(self.r_r_bias, std=0.02)

    def context(
        self, memory: Tensor | None, q_len: int, injection: Tensor | None, memory_injection: Tensor | None = None
    ) -> AttentionContext:
        """The part of the attention that does not depend on z.

        Args:
            memory: (B, M, d_model) earlier positions, or None.
            q_len: L, the positions of the current segment.
            injection: (B, L, 3 * n_heads * d_head) added to the queries, keys and values of the current segment.
            memory_injection: (B, M, 3 * n_heads * d_head) added to the memory's keys and values (the injection of
                the memory's own positions, kept with it as the reference DEQ-Transformer keeps it), or None.

        The position terms are built in the dtype of the module's parameters (autocast casts them like any input).
        """
        k_len = q_len + (0 if memory is None else memory.shape[1])
        memory_heads = None if memory is None else self.qkv(memory)  # (B, M, 3 H dh)
        if memory_heads is not None and memory_injection is not None:
            memory_heads = memory_heads + memory_injection
        dtype, device = self.r_w_bias.dtype, self.r_w_bias.device
        positions: GatheredPositions | RotatedPositions
        if self.fused:
            positions = rotated_positions(q_len, k_len, self.d_model, dtype, device)
        else:
            encodings = sinusoid_positions(torch.arange(k_len - 1, -1, -1, device=device), self.d_model, dtype)
            r = self.r_net(encodings).reshape(k_len, self.n_heads, self.d_head)
            positions = GatheredPositions(r, *relative_index(q_len, k_len, device))
        return AttentionContext(memory_heads, injection, positions)

    def forward(self, z: Tensor, memory: Tensor | None, injection: Tensor | None = None) -> Tensor:
        """Attend from z (B, L, d_model) to [memory; z], causally (arguments as in :meth:`context`); (B, L, d_model)."""
        return self.attend(z, self.context(memory, z.shape[1], injection))

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
        pos = ctx.positions
        if isinstance(pos, RotatedPositions):
            mixed = self._rotated(q, k, v, pos)
        else:
            mixed = self._gathered(q, k, v, pos)
        return self.out(mixed.reshape(batch, q_len, -1))

    def _gathered(self, q: Tensor, k: Tensor, v: Tensor, pos: GatheredPositions) -> Tensor:
        """q (B, L, H, dh), k and v (B, K, H, dh) -> (B, L, H, dh), scores written out (Transformer-XL's way)."""
        batch, q_len, _, _ = q.shape
        k_len = k.shape[1]
        scale = 1.0 / math.sqrt(self.d_head)
        content = torch.einsum("bihd,bjhd->bhij", (q + self.r_w_bias) * scale, k)
        by_distance = torch.einsum("bihd,jhd->bhij", (q + self.r_r_bias) * scale, pos.r)  # (B, H, L, K) by distance
        position = by_distance.gather(3, pos.index.expand(batch, self.n_heads, q_len, k_len))
        scores = (content + position).masked_fill_(pos.future, float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        return torch.einsum("bhij,bjhd->bihd", weights, v)

    def _rotated(self, q: Tensor, k: Tensor, v: Tensor, pos: RotatedPositions) -> Tensor:
        """As :meth:`_gathered`, the scores as one dot product of width d_head + d_model (module docstring)."""
        batch, k_len = k.shape[:2]
        weight = self.r_net.weight.reshape(self.n_heads, self.d_head, self.d_model)
        a = torch.einsum("bihd,hdm->bihm", q + self.r_r_bias, weight)  # (B, L, H, d_model)
        queries = torch.cat([q + self.r_w_bias, rotate_queries(a, pos)], dim=-1)
        key_features = pos.keys.to(k.dtype)[None, :, None, :].expand(batch, k_len, self.n_heads, self.d_model)
        keys = torch.cat([k, key_features], dim=-1)
        values = F.pad(v, (0, self.d_model))  # the kernel wants one width for queries, keys and values
        heads = (t.transpose(1, 2).to(v.dtype) for t in (queries, keys, values))  # (B, H, *, d_head + d_model)
        mixed = fused_attention(*heads, pos.allowed, 1.0 / math.sqrt(self.d_head))
        return mixed[..., : self.d_head].transpose(1, 2)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, scale: float) -> Tensor:
    """softmax(q k^T scale, over the ``allowed`` keys) v by ``scaled_dot_product_attention``; q (B, H, L, E), k and v
    (B, H, K, E), ``allowed`` (L, K) bool or None for plain causal (K = L). Returns (B, H, L, E).

    Differentiable twice: the fused kernel's backward cannot be differentiated again, so when a backward pass builds a
    graph (``create_graph=True``, e.g. the Jacobian term's vector-Jacobian product), :class:`_TwiceDifferentiable`
    computes it from the attention's math implementation instead; an ordinary backward pass is the kernel's own."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return _TwiceDifferentiable.apply(q, k, v, allowed, scale)
    return _sdpa(q, k, v, allowed, scale)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, scale: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None, scale=scale)


class _TwiceDifferentiable(torch.autograd.Function):
    """The fused attention with its kernel's backward, and a differentiable backward when a graph is being built."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, scale: float) -> Tensor:
        with torch.enable_grad():  # the kernel's own graph, on detached copies of the inputs (same storage)
            leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
            out = _sdpa(*leaves, allowed, scale)
        ctx.kernel = (leaves, out)
        ctx.allowed, ctx.scale = allowed, scale
        ctx.save_for_backward(q, k, v)
        return out.detach()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():  # create_graph=True: recompute with the math implementation, keep its graph
            q, k, v = ctx.saved_tensors
            with sdpa_kernel(SDPBackend.MATH):
                out = _sdpa(q, k, v, ctx.allowed, ctx.scale)
            grads = torch.autograd.grad(out, (q, k, v), grad, create_graph=True)
        else:  # the kernel's backward; kept for the next pass (an adjoint solve makes one per iteration)
            leaves, out = ctx.kernel
            grads = torch.autograd.grad(out, leaves, grad, retain_graph=True)
        return (*grads, None, None)
