"""Explicit baselines of the student report: FC, one-layer GRU and 3-layer stacked GRU."""

from __future__ import annotations

from torch import Tensor, nn

from .readout import Readout


class FCClassifier(nn.Module):
    """Flatten the one-hot input (B, T, V) and apply three linear layers with tanh between: T V -> H -> H -> 1."""

    def __init__(self, vocab: int, hidden: int, length: int) -> None:
        super().__init__()
        self.length = length
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(vocab * length, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, tokens: Tensor) -> tuple[Tensor, None]:
        """tokens (B, T, V) -> (logits (B,), None)."""
        if tokens.shape[1] != self.length:
            raise ValueError(f"the FC model was built for {self.length} symbols, got {tokens.shape[1]}.")
        return self.net(tokens).squeeze(-1), None


class GRUClassifier(nn.Module):
    """A GRU with ``layers`` layers over the one-hot input, then the readout (flatten + linear in the report)."""

    def __init__(self, vocab: int, hidden: int, length: int, readout: str = "flatten", layers: int = 1) -> None:
        super().__init__()
        self.gru = nn.GRU(vocab, hidden, num_layers=layers, batch_first=True)
        self.readout = Readout(hidden, length, readout)

    def forward(self, tokens: Tensor) -> tuple[Tensor, None]:
        """tokens (B, T, V) -> (logits (B,), None)."""
        return self.readout(self.gru(tokens)[0]), None
