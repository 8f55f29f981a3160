"""The synthetic 1D regression task of Bai, Koltun & Kolter (2021), section 5.1.

y = h(x) + delta with h(x) = 1.5 x^3 + x^2 - 5 x + 2 sin(x) - 3, x ~ U[-2, 2] and delta ~ N(0, 0.05^2): the paper
writes N(0, 0.05); we read 0.05 as the standard deviation (variance 0.0025).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def target_function(x: Tensor) -> Tensor:
    """h(x) = 1.5 x^3 + x^2 - 5 x + 2 sin(x) - 3, elementwise, any shape."""
    return 1.5 * x**3 + x**2 - 5 * x + 2 * torch.sin(x) - 3


@dataclass(frozen=True)
class SyntheticData:
    """Train and validation pairs; every tensor has shape (N, 1), float32."""

    x_train: Tensor
    y_train: Tensor
    x_valid: Tensor
    y_valid: Tensor


def make_synthetic(n_train: int = 4096, n_valid: int = 1000, noise_std: float = 0.05, seed: int = 0) -> SyntheticData:
    """Draw n_train + n_valid pairs (x, h(x) + delta), deterministic by ``seed``; the first n_train are training data.

    Args:
        n_train, n_valid: numbers of pairs (the paper: 4096 and 1000, 5096 in all).
        noise_std: standard deviation of the Gaussian noise delta added to h(x).
        seed: seed of a private generator (the global torch RNG is not touched).
    """
    if n_train < 1 or n_valid < 1:
        raise ValueError(f"n_train and n_valid must be >= 1, got {n_train} and {n_valid}.")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}.")
    gen = torch.Generator().manual_seed(seed)
    n = n_train + n_valid
    x = torch.rand(n, 1, generator=gen) * 4 - 2
    y = target_function(x) + noise_std * torch.randn(n, 1, generator=gen)
    return SyntheticData(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
