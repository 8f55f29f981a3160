"""Small helpers shared by the cells and baselines."""

from __future__ import annotations

import torch
from torch import Tensor, nn

import deq_core


def apply_weight_norm(module: nn.Module) -> nn.Module:
    """Weight-normalize (w = g v / ||v||, per output unit) every Linear and Conv1d weight inside ``module``."""
    for sub in list(module.modules()):
        if isinstance(sub, (nn.Linear, nn.Conv1d)) and not hasattr(sub, "parametrizations"):
            deq_core.weight_norm(sub, "weight", dim=0)
    return module


def shift_right(x: Tensor, first: Tensor | None) -> Tensor:
    """x delayed by one step along dim 1: out[:, t] = x[:, t - 1], out[:, 0] = first (zeros when None).

    Args:
        x: (B, L, C).
        first: (B, 1, C) or None.
    """
    if first is None:
        first = torch.zeros_like(x[:, :1])
    return torch.cat([first, x[:, :-1]], dim=1)


def left_context(x: Tensor, history: Tensor | None, size: int) -> Tensor:
    """[history; x] along dim 1 with exactly ``size`` positions of history (zero-padded when missing or short).

    Args:
        x: (B, L, C).
        history: (B, H, C) earlier positions, or None.
        size: how many earlier positions a causal convolution needs ((kernel - 1) * dilation).

    Returns:
        (B, size + L, C).
    """
    if size == 0:
        return x
    if history is None:
        history = x.new_zeros(x.shape[0], 0, x.shape[2])
    history = history[:, -size:] if history.shape[1] >= size else history
    missing = size - history.shape[1]
    pad = x.new_zeros(x.shape[0], missing, x.shape[2])
    return torch.cat([pad, history.to(x.dtype), x], dim=1)


def causal_conv(conv: nn.Conv1d, x: Tensor, history: Tensor | None = None) -> Tensor:
    """A causal Conv1d over time: output t sees inputs t - (k - 1) d, ..., t only.

    Args:
        conv: a Conv1d with padding 0.
        x: (B, L, C_in), batch first, time second.
        history: (B, H, C_in) inputs before x (e.g. the previous segment's tail), or None for zeros.

    Returns:
        (B, L, C_out).
    """
    size = (conv.kernel_size[0] - 1) * conv.dilation[0]
    padded = left_context(x, history, size)
    return conv(padded.transpose(1, 2)).transpose(1, 2)
