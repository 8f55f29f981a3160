"""Damped fixed-point iteration: z <- (1 - damping) z + damping f(z)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ._options import check_number
from .base import Loop, Solver, Step


@dataclass(frozen=True)
class FixedPoint(Solver):
    """Damped fixed-point iteration z_{k+1} = z_k + damping (f(z_k) - z_k). No state; one call of f per iteration.

    Args:
        damping: step size in (0, 1]; 1 is plain iteration z <- f(z), smaller values damp oscillations.
    """

    damping: float = 1.0
    name: ClassVar[str] = "fixed_point"
    capturable: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not 0.0 < check_number(self.name, "damping", self.damping) <= 1.0:
            raise ValueError(f"{self.name}: damping must be in (0, 1], got {self.damping}.")

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> None:
        return None

    def step(self, state: None, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        if self.damping == 1.0:
            return Step(fz, state)
        return Step(torch.add(z, g, alpha=self.damping), state, temporary=True)
