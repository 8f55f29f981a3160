"""LSTM and GRU baselines (the recurrent rows of the DEQ paper's copy-memory table)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from .interface import BodyOutput


class RecurrentBody(nn.Module):
    """A (multi-layer) LSTM or GRU over the embedded input; the final hidden state is carried across segments.

    Args:
        kind: "lstm" or "gru".
        d_in, d_hidden, n_layers: sizes.
        dropout: between layers (torch's own; only when n_layers > 1).
    """

    def __init__(self, kind: str, d_in: int, d_hidden: int, n_layers: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        if kind not in ("lstm", "gru"):
            raise ValueError(f"unknown recurrent kind {kind!r}; choose 'lstm' or 'gru'.")
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(d_in, d_hidden, n_layers, batch_first=True, dropout=dropout if n_layers > 1 else 0.0)

    def forward(self, x: Tensor, state: Any = None) -> BodyOutput:
        """x: (B, L, d_in) -> hidden (B, L, d_hidden); state: the final (h, c) or h of the previous segment."""
        hidden, last = self.rnn(x, state)
        detached = tuple(t.detach() for t in last) if isinstance(last, tuple) else last.detach()
        return BodyOutput(hidden, detached, None)
