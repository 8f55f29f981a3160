"""Bodies built from a cell: the DEQ (solve for z* = f(z*; x)) and the weight-tied network unrolled L times."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

import deq_core
from deq_core import DEQ

from .interface import BodyOutput


class DEQBody(nn.Module):
    """z* = f(z*; x) found by the DEQ layer; hidden = readout(z*).

    Args:
        cell: a module implementing :class:`deq_lm.models.interface.Cell`.
        deq: the DEQ layer (solvers, limits, tolerances, backward mode).
    """

    def __init__(self, cell: nn.Module, deq: DEQ) -> None:
        super().__init__()
        self.cell = cell
        self.deq = deq

    def forward(self, x: Tensor, state: Any = None) -> BodyOutput:
        """x: (B, L, d_in) -> BodyOutput with hidden (B, L, d_out) and the DEQ statistics. The layer follows its
        Plan when one is set (:func:`deq_core.use_plan`: pretraining unroll, jittered limit, Jacobian term)."""
        cell: Any = self.cell
        with deq_core.cached_weights(self.cell):
            ctx = cell.setup(x, state)
            z, info = self.deq(lambda z: cell.f(z, ctx), cell.initial(ctx))
            hidden = cell.readout(z, ctx)
        return BodyOutput(hidden, cell.next_state(z, ctx), info)


class UnrolledBody(nn.Module):
    """The weight-tied network: z_{i+1} = f(z_i; x) for ``depth`` layers from z_0 = 0, ordinary backprop."""

    def __init__(self, cell: nn.Module, depth: int) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}.")
        self.cell = cell
        self.depth = depth

    def forward(self, x: Tensor, state: Any = None, depth: int | None = None) -> BodyOutput:
        """x: (B, L, d_in) -> BodyOutput with hidden (B, L, d_out); ``depth`` overrides the number of layers."""
        cell: Any = self.cell
        with deq_core.cached_weights(self.cell):
            ctx = cell.setup(x, state)
            z = cell.initial(ctx)
            for _ in range(self.depth if depth is None else depth):
                z = cell.f(z, ctx)
            hidden = cell.readout(z, ctx)
        return BodyOutput(hidden, cell.next_state(z, ctx), None)
