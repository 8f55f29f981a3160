"""The interface every sequence body implements, and the per-call DEQ controls the training loop passes down.

A *body* maps embedded inputs (B, L, d_in) and the state carried from the previous segment to hidden states
(B, L, d_out), the state for the next segment, and, for DEQ bodies, the solver statistics. A *cell* is the map
f(z; x) of a DEQ (or of a weight-tied network), split into the steps a body needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor

from deq_core import DEQInfo


@dataclass(frozen=True)
class Control:
    """Per-call settings of a DEQ body (ignored by explicit ones).

    Attributes:
        unroll: apply f this many times with ordinary backprop instead of solving (pretraining); None: solve.
        max_iter: forward iteration limit for this call (e.g. a random jitter); None: the layer's own.
        jacobian_loss: also compute the Hutchinson estimate of ||J_f(z*)||_F^2 / D (``info.jacobian_loss``).
    """

    unroll: int | None = None
    max_iter: int | None = None
    jacobian_loss: bool = False


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
