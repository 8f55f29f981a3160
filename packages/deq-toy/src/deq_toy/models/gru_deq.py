"""The GRU cell f(z, x) = tanh(GRU(z + x)) of the student report, as a DEQ and applied a fixed number of times.

Shapes: the input is one-hot symbols (B, T, V); the state z and the input injection x are (B, T, H): the cell runs a
one-layer GRU over the T positions of z + x. Both models start from z0 = GRU0(one-hot input), a second GRU.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from deq_core import DEQ, Anderson, DEQInfo, Implicit

from .readout import Readout


class GRUCell(nn.Module):
    """f(z, x) = tanh(GRU(z + x)); z, x of shape (B, T, H)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(hidden, hidden, batch_first=True)

    def forward(self, z: Tensor, x: Tensor) -> Tensor:
        return torch.tanh(self.gru(z + x)[0])


class _GRUCellModel(nn.Module):
    """Shared parts: input injection x = Linear(one-hot), start z0 = GRU0(one-hot), the cell, the readout."""

    def __init__(self, vocab: int, hidden: int, length: int, readout: str) -> None:
        super().__init__()
        self.inject = nn.Linear(vocab, hidden)
        self.start = nn.GRU(vocab, hidden, batch_first=True)
        self.cell = GRUCell(hidden)
        self.readout = Readout(hidden, length, readout)


class RepeatedGRU(_GRUCellModel):
    """z_{k+1} = f(z_k, x) applied ``repeats`` times from z0 = GRU0(x), backpropagated through every application.

    ``info`` reports the relative residual ||z_K - z_{K-1}|| / ||z_K|| of the last application per sample.
    """

    def __init__(self, vocab: int, hidden: int, length: int, readout: str = "flatten", repeats: int = 50) -> None:
        super().__init__(vocab, hidden, length, readout)
        self.repeats = repeats

    def forward(self, tokens: Tensor) -> tuple[Tensor, DEQInfo]:
        """tokens (B, T, V) one-hot -> (logits (B,), info)."""
        x = self.inject(tokens)
        z = self.start(tokens)[0]
        prev = z
        for _ in range(self.repeats):
            prev, z = z, self.cell(z, x)
        return self.readout(z), DEQInfo.from_unrolled(prev, z, self.repeats, stop_mode="rel")


def report_deq(
    anderson_m: int = 6, max_iter: int = 50, tol: float = 1e-3, backward_max_iter: int = 50, backward_tol: float = 1e-3
) -> DEQ:
    """The student report's DEQ layer (the GRU-DEQ's default): Anderson (m = ``anderson_m``) to relative residual
    ``tol`` in ``max_iter`` iterations; implicit backward by the same Anderson to ``backward_tol`` in
    ``backward_max_iter``."""
    return DEQ(
        solver=Anderson(m=anderson_m),
        max_iter=max_iter,
        tol=tol,
        stop_mode="rel",
        backward=Implicit(Anderson(m=anderson_m), max_iter=backward_max_iter, tol=backward_tol),
    )


class GRUDEQ(_GRUCellModel):
    """z* = f(z*, x) found by the DEQ layer ``deq`` from z0 = GRU0(x) and differentiated by its backward mode.

    GRU0 only supplies the starting point: the gradient does not flow into z0, so GRU0 keeps its initial weights.
    Under ``deq_core.use_plan(model, deq_core.Plan(jacobian_loss=True))`` its info also holds the Hutchinson estimate
    of ||J_f(z*)||_F^2 / (T H) in ``info.jacobian_loss``; the plan's ``unroll`` / ``max_iter`` apply as well.

    Args:
        vocab, hidden, length: one-hot width V, state width H, expression length T.
        readout: "flatten" (all positions) or "last" (the last position, any length).
        deq: the :class:`deq_core.DEQ` layer (solver, limits, backward mode). None: :func:`report_deq`, the
            report's Anderson (m=6, 50 iterations, relative tolerance 1e-3) with the implicit backward.
    """

    def __init__(self, vocab: int, hidden: int, length: int, readout: str = "flatten", deq: DEQ | None = None) -> None:
        super().__init__(vocab, hidden, length, readout)
        self.deq = report_deq() if deq is None else _checked_layer(deq)

    def forward(self, tokens: Tensor) -> tuple[Tensor, DEQInfo]:
        """tokens (B, T, V) one-hot -> (logits (B,), info with nfe, residual, jacobian_loss, ...)."""
        x = self.inject(tokens)
        with torch.no_grad():
            z0 = self.start(tokens)[0]
        z_star, info = self.deq(lambda z: self.cell(z, x), z0)
        assert isinstance(z_star, Tensor)
        return self.readout(z_star), info


def _checked_layer(deq: object) -> DEQ:
    """``deq`` when it is a :class:`deq_core.DEQ`; TypeError otherwise."""
    if not isinstance(deq, DEQ):
        raise TypeError(f"deq must be a deq_core.DEQ layer (or None for the default), got {type(deq).__name__}.")
    return deq
