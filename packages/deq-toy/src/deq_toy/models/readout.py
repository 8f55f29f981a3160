"""Map a sequence of hidden states (B, T, H) to one logit per sample."""

from __future__ import annotations

from torch import Tensor, nn

READOUTS = ("flatten", "last")


class Readout(nn.Module):
    """The logit from the hidden states (B, T, H) -> (B,).

    kind "flatten": Linear(T * H -> 1) on all positions (the report's choice; fixed length T);
    kind "last": Linear(H -> 1) on the last position (works for any length)."""

    def __init__(self, hidden: int, length: int, kind: str = "flatten") -> None:
        super().__init__()
        if kind not in READOUTS:
            raise ValueError(f"unknown readout {kind!r}; choose one of {list(READOUTS)}.")
        self.kind = kind
        self.length = length
        self.linear = nn.Linear(hidden * length if kind == "flatten" else hidden, 1)

    @property
    def any_length(self) -> bool:
        return self.kind == "last"

    def forward(self, states: Tensor) -> Tensor:
        """states (B, T, H) -> logits (B,)."""
        if self.kind == "last":
            return self.linear(states[:, -1]).squeeze(-1)
        if states.shape[1] != self.length:
            raise ValueError(
                f"the flatten readout was built for sequences of {self.length} symbols, got {states.shape[1]}; "
                "use readout=last for inputs of other lengths."
            )
        return self.linear(states.flatten(1)).squeeze(-1)
