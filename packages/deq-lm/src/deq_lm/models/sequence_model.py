"""The model every task trains: token embedding -> body (a DEQ or an explicit network) -> linear head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from deq_core import DEQInfo

from .interface import Control


@dataclass
class ModelOutput:
    """logits: (B, L, vocab); hidden: (B, L, d_hidden); state: for the next segment (detached) or None;
    info: DEQ statistics (None for explicit models). ``info.nfe_backward`` is filled in once backward has run."""

    logits: Tensor
    hidden: Tensor
    state: Any
    info: DEQInfo | None


class SequenceModel(nn.Module):
    """Causal sequence model over a vocabulary.

    Args:
        vocab_size: number of token ids.
        d_embed: embedding width (the body's input width).
        body: a module ``body(x, state, control) -> BodyOutput`` (see :mod:`deq_lm.models.interface`).
        d_hidden: width of the body's output.
        is_deq: whether the body solves for an equilibrium (for logging and the training loop's DEQ features).
    """

    def __init__(self, vocab_size: int, d_embed: int, body: nn.Module, d_hidden: int, is_deq: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_embed)
        self.body = body
        self.head = nn.Linear(d_hidden, vocab_size)
        self.is_deq = is_deq

    def forward(
        self,
        tokens: Tensor,
        state: Any = None,
        *,
        unroll: int | None = None,
        max_iter: int | None = None,
        jacobian_loss: bool = False,
    ) -> ModelOutput:
        """tokens: (B, L) LongTensor; ``state`` from the previous segment's output (or None).

        ``unroll``, ``max_iter`` and ``jacobian_loss`` reach the DEQ layer (see :class:`Control`); explicit bodies
        ignore them.
        """
        control = Control(unroll=unroll, max_iter=max_iter, jacobian_loss=jacobian_loss)
        out = self.body(self.embed(tokens), state, control)
        return ModelOutput(self.head(out.hidden), out.hidden, out.state, out.info)
