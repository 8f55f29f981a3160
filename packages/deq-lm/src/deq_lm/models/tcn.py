"""The temporal convolutional network baseline (Bai, Kolter & Koltun 2018): residual blocks of two dilated causal
convolutions with weight normalization, ReLU and dropout; dilation 2^i at level i."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .common import apply_weight_norm, causal_conv
from .interface import BodyOutput


class TemporalBlock(nn.Module):
    """out = ReLU(x' + drop(ReLU(conv2(drop(ReLU(conv1(x)))))) with x' = x or a 1x1 projection; (B, L, C)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(c_in, c_out, kernel, dilation=dilation)
        self.conv2 = nn.Conv1d(c_out, c_out, kernel, dilation=dilation)
        self.skip: nn.Module = nn.Linear(c_in, c_out) if c_in != c_out else nn.Identity()
        self.drop = nn.Dropout(dropout)
        for conv in (self.conv1, self.conv2):
            nn.init.normal_(conv.weight, std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        h = self.drop(torch.relu(causal_conv(self.conv1, x)))
        h = self.drop(torch.relu(causal_conv(self.conv2, h)))
        return torch.relu(self.skip(x) + h)


class TCNBody(nn.Module):
    """``n_levels`` temporal blocks of ``d_hidden`` channels, kernel ``kernel``, dilations 1, 2, 4, ...

    Receptive field: 1 + 2 (kernel - 1) (2^n_levels - 1) positions. Segments are independent (state None).
    """

    def __init__(self, d_in: int, d_hidden: int, n_levels: int, kernel: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(TemporalBlock(d_in if i == 0 else d_hidden, d_hidden, kernel, 2**i, dropout) for i in range(n_levels))
        )
        apply_weight_norm(self.blocks)

    def forward(self, x: Tensor, state: Any = None) -> BodyOutput:
        """x: (B, L, d_in) -> hidden (B, L, d_hidden)."""
        return BodyOutput(self.blocks(x), None, None)
