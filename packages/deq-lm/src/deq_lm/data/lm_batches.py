"""Ordered language-model batches (the Transformer-XL / DEQ protocol) and perplexity.

The token stream of a split is cut into ``batch_size`` columns read side by side; each step takes the next ``tgt_len``
positions of every column, and the targets are the inputs shifted by one. Consecutive segments continue each
other column by column, so a model can carry its memory (past equilibrium states, TrellisNet history) from one
segment to the next. Neighbouring columns overlap by one token (column b is ids[b*L : (b+1)*L + 1]), so the targets,
read column by column, are ids[1 : B*L + 1]: every token but the first and the last N - 1 - B*L (< B) is predicted
exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from torch import Tensor


def batchify(ids: Tensor, batch_size: int) -> Tensor:
    """Cut a 1-D token stream into ``batch_size`` columns of L + 1 tokens, L = (N - 1) // batch_size.

    Args:
        ids: (N,) token ids in corpus order.
        batch_size: number of columns B, 1 <= B <= N - 1.

    Returns:
        (B, L + 1) tensor (a view of ``ids``); row b is ids[b*L : (b+1)*L + 1].
    """
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    length = (ids.numel() - 1) // batch_size
    if length < 1:
        raise ValueError(f"a split of {ids.numel()} tokens is too short for {batch_size} columns.")
    return ids.unfold(0, length + 1, length)[:batch_size]


@dataclass(frozen=True)
class OrderedLMBatches:
    """The segments of one split, in order: segment i is (inputs, targets), both (B, s) LongTensors with
    s = tgt_len (the last one may be shorter unless ``drop_last``), targets[:, t] = inputs[:, t + 1] within a column."""

    columns: Tensor  # (B, L + 1), from batchify
    tgt_len: int
    drop_last: bool = False

    def __post_init__(self) -> None:
        if self.tgt_len < 1:
            raise ValueError(f"tgt_len must be >= 1, got {self.tgt_len}.")
        if self.drop_last and self.length < self.tgt_len:
            raise ValueError(f"columns of {self.length} targets are shorter than one segment of {self.tgt_len}.")

    @classmethod
    def from_ids(cls, ids: Tensor, batch_size: int, tgt_len: int, drop_last: bool = False) -> OrderedLMBatches:
        """Segments of the (N,) stream ``ids`` cut into ``batch_size`` columns."""
        return cls(batchify(ids, batch_size), tgt_len, drop_last)

    @property
    def batch_size(self) -> int:
        return self.columns.shape[0]

    @property
    def length(self) -> int:
        """Number of targets per column, L."""
        return self.columns.shape[1] - 1

    @property
    def n_targets(self) -> int:
        """Number of predicted tokens over all segments."""
        return self.batch_size * (len(self) * self.tgt_len if self.drop_last else self.length)

    def __len__(self) -> int:
        if self.drop_last:
            return self.length // self.tgt_len
        return math.ceil(self.length / self.tgt_len)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        """Segment ``index`` (0 <= index < len): (inputs, targets), each (B, s)."""
        if not 0 <= index < len(self):
            raise IndexError(f"segment {index} out of range [0, {len(self)}).")
        start = index * self.tgt_len
        end = min(start + self.tgt_len, self.length)
        return self.columns[:, start:end], self.columns[:, start + 1 : end + 1]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for index in range(len(self)):
            yield self[index]


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """exp(mean token NLL): ``nll_sum`` the summed negative log-likelihood in nats over ``n_tokens`` tokens.

    Returns inf when the mean is too large for a float."""
    if n_tokens < 1:
        raise ValueError(f"perplexity needs at least one token, got {n_tokens}.")
    mean = nll_sum / n_tokens
    return math.exp(mean) if mean < 709.0 else math.inf
