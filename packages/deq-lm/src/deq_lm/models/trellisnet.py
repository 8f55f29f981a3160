"""The TrellisNet cell (Bai, Kolter & Koltun 2019), used as a DEQ (DEQ-TrellisNet) or unrolled L times.

State z = [h; c], (B, L, 2 d_hidden). One application of the weight-tied layer::

    a_t   = Conv(h)[t] + Inj(x)[t]          causal convolutions: kernel k, dilation d, over [history; .]
    i, f, o, g = split(a_t)
    c'_t  = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)        (the LSTM-gated activation; c shifted one step)
    h'_t  = sigmoid(o) * tanh(c'_t)

The history (the last (k - 1) d inputs and hidden states, and the last cell state) is carried across segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from deq_core import VariationalDropout

from .common import apply_weight_norm, causal_conv, shift_right


@dataclass
class TrellisContext:
    """What the TrellisNet cell computes once per segment."""

    x: Tensor  # (B, L, d_in), kept to pass its tail to the next segment
    injection: Tensor  # (B, L, 4 d_hidden)
    h_history: Tensor | None  # (B, P, d_hidden)
    c_first: Tensor | None  # (B, 1, d_hidden): c at the position before the segment


class TrellisNetCell(nn.Module):
    """f(z; x) of the TrellisNet.

    Args:
        d_in: width of the embedded input.
        d_hidden: width of h (and of c).
        kernel, dilation: of both causal convolutions.
        dropout: variational dropout on h before the convolution (shared over positions and solver iterations).
        weight_norm: weight-normalize both convolutions.

    Segment state: (x_history (B, P, d_in), h_history (B, P, d_hidden), c_last (B, 1, d_hidden)) with
    P = (kernel - 1) * dilation, or None at the start of a sequence.
    """

    def __init__(
        self,
        d_in: int,
        d_hidden: int,
        kernel: int = 2,
        dilation: int = 1,
        dropout: float = 0.0,
        weight_norm: bool = True,
    ) -> None:
        super().__init__()
        if kernel < 1 or dilation < 1:
            raise ValueError(f"kernel and dilation must be >= 1, got {kernel} and {dilation}.")
        self.d_hidden = d_hidden
        self.history = (kernel - 1) * dilation
        self.inject = nn.Conv1d(d_in, 4 * d_hidden, kernel, dilation=dilation)
        self.conv = nn.Conv1d(d_hidden, 4 * d_hidden, kernel, dilation=dilation, bias=False)
        self.drop = VariationalDropout(dropout, shared_dims=(1,))
        if weight_norm:
            apply_weight_norm(self)

    def setup(self, x: Tensor, state: Any) -> TrellisContext:
        x_hist, h_hist, c_last = state if state is not None else (None, None, None)
        injection = causal_conv(self.inject, x, x_hist)
        self.drop.reset_mask(injection.new_zeros(x.shape[0], x.shape[1], self.d_hidden))
        return TrellisContext(x, injection, h_hist, c_last)

    def initial(self, ctx: TrellisContext) -> Tensor:
        batch, length, _ = ctx.injection.shape
        return ctx.injection.new_zeros(batch, length, 2 * self.d_hidden)

    def f(self, z: Tensor, ctx: TrellisContext) -> Tensor:
        h, c = z.split(self.d_hidden, dim=-1)
        gates = causal_conv(self.conv, self.drop(h), ctx.h_history) + ctx.injection
        i, f, o, g = gates.chunk(4, dim=-1)
        c_new = torch.sigmoid(f) * shift_right(c, ctx.c_first) + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        return torch.cat([h_new, c_new], dim=-1)

    def readout(self, z: Tensor, ctx: TrellisContext) -> Tensor:
        return z[..., : self.d_hidden]

    def next_state(self, z: Tensor, ctx: TrellisContext) -> tuple[Tensor, Tensor, Tensor]:
        h, c = z.split(self.d_hidden, dim=-1)
        p = self.history
        x_tail = _tail(ctx.x, p)
        h_tail = _tail(h, p)
        return x_tail.detach(), h_tail.detach(), c[:, -1:].detach()


def _tail(x: Tensor, size: int) -> Tensor:
    return x[:, x.shape[1] - min(size, x.shape[1]) :]
