"""What the training loop needs from a task: a model, deterministic batches, a loss, an evaluation, final outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from deq_core import DEQInfo


class Task(Protocol):
    """One experiment: data + model + loss. Built after the global seed is set (the model's initialization)."""

    model: nn.Module
    steps_per_epoch: int
    total_steps: int
    clip: float | None

    def batch(self, step: int) -> Any:
        """The training batch of ``step`` (0-based), a function of (seed, step) only, so that a resumed run sees the
        same batches."""

    def train_step(self, batch: Any, step: int) -> tuple[Tensor, dict[str, float], DEQInfo | None]:
        """Forward pass in train mode: (loss to backpropagate, statistics, DEQ info or None)."""

    def evaluate(self) -> dict[str, float]:
        """Validation statistics (model in eval mode, no gradients)."""

    def finish(self, output_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Final evaluation and plots; returns the final results (also written to output_dir/results.json)."""


def epoch_batch_indices(n: int, batch_size: int, step: int, seed: int) -> Tensor:
    """Indices of the batch of ``step``: epoch e = step // (n // batch_size) uses a permutation seeded by (seed, e)
    and the batches are its consecutive slices (the last partial batch is dropped)."""
    per_epoch = max(n // batch_size, 1)
    epoch, index = divmod(step, per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=gen)
    return perm[index * batch_size : (index + 1) * batch_size]
