"""The model every task trains: token embedding -> body (a DEQ or an explicit network) -> output head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from deq_core import DEQInfo


@dataclass
class ModelOutput:
    """hidden: (B, L, d_hidden); state: for the next segment (detached) or None; info: DEQ statistics (None for
    explicit models; ``info.nfe_backward`` is filled in once backward has run). logits: (B, L, vocab) with a linear
    head, None with the adaptive softmax. nll: (B, L) per-token negative log-likelihood in nats when the model was
    called with targets, else None."""

    logits: Tensor | None
    hidden: Tensor
    state: Any
    info: DEQInfo | None
    nll: Tensor | None = None


class SequenceModel(nn.Module):
    """Causal sequence model over a vocabulary.

    Args:
        embedding: tokens (B, L) -> (B, L, d_in), e.g. ``nn.Embedding`` or ``AdaptiveEmbedding``.
        body: a module ``body(x, state) -> BodyOutput`` (see :mod:`deq_lm.models.interface`).
        head: an ``OutputHead`` (``head.predict(hidden, targets) -> (logits or None, nll or None)``): a ``LinearHead``
            (logits) or an ``AdaptiveLogSoftmax`` (NLL only), possibly tied to ``embedding``.
        is_deq: whether the body solves for an equilibrium (for logging and the training loop's DEQ features).
    """

    def __init__(self, embedding: nn.Module, body: nn.Module, head: nn.Module, is_deq: bool) -> None:
        super().__init__()
        self.embed = embedding
        self.body = body
        self.head = head
        self.is_deq = is_deq

    def forward(
        self,
        tokens: Tensor,
        state: Any = None,
        *,
        targets: Tensor | None = None,
    ) -> ModelOutput:
        """tokens: (B, L) LongTensor; ``state`` from the previous segment's output (or None); ``targets`` (B, L):
        also return the per-token NLL.

        A DEQ body's per-step choices (unrolled pretraining, a jittered limit, the Jacobian term) are set on its
        layer for the step, ``with deq_core.use_plan(model, deq_core.Plan(...)):``, as the training skeleton does.
        """
        out = self.body(self.embed(tokens), state)
        logits, nll = self.head.predict(out.hidden, targets)
        return ModelOutput(logits, out.hidden, out.state, out.info, nll)
