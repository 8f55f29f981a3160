"""The interface every sequence body implements.

A *body* maps embedded inputs (B, L, d_in) and the state carried from the previous segment to hidden states
(B, L, d_out), the state for the next segment, and, for DEQ bodies, the solver statistics: ``body(x, state)``. A
*cell* is the map f(z; x) of a DEQ (or of a weight-tied network), split into the steps a body needs. What a DEQ body
does in one training step (unrolled pretraining, a jittered limit, the Jacobian term) is not an argument: the training
skeleton sets it on the model's DEQ layers (:func:`deq_core.use_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor

from deq_core import DEQInfo


@dataclass
class BodyOutput:
    """hidden: (B, L, d_out); state: what the next segment needs (detached) or None; info: DEQ statistics or None."""

    hidden: Tensor
    state: Any
    info: DEQInfo | None = None


class Cell(Protocol):
    """f(z; x) of a DEQ, in steps. ``Context`` is whatever the cell computes once per segment (input injection,
    memory, positional encodings); the state z is a Tensor (B, L, d_state)."""

    def setup(self, x: Tensor, state: Any) -> Any:
        """Once per segment, before the solve: injection from x (B, L, d_in), memory from ``state``, dropout masks."""

    def initial(self, ctx: Any) -> Tensor:
        """z0, (B, L, d_state)."""

    def f(self, z: Tensor, ctx: Any) -> Tensor:
        """One application of the cell, (B, L, d_state) -> (B, L, d_state)."""

    def readout(self, z: Tensor, ctx: Any) -> Tensor:
        """Hidden states (B, L, d_out) from the equilibrium z."""

    def next_state(self, z: Tensor, ctx: Any) -> Any:
        """The state for the next segment (detached), or None."""
