"""The copy-memory task of the TCN benchmark (Bai, Kolter & Koltun 2018), Table 1 of the DEQ paper.

A sequence of length T + 20 over the alphabet {0, ..., 9}:

    input : s_1 .. s_10 (each drawn uniformly from 1..8), then T - 1 blanks (0), then eleven markers (9)
    target: T + 10 blanks (0), then s_1 .. s_10

This is the TCN benchmark's own generator (locuslab/TCN, copy_memory/utils.py): the marker fills the last eleven
input positions, the first of them one step before the recall begins. The model must remember the ten symbols for
T steps and repeat them while the markers last. The loss is the cross-entropy over all T + 20 positions; the metric
is the accuracy over the last ten.
"""

from __future__ import annotations

import torch
from torch import Tensor

N_SYMBOLS = 10  # vocabulary: 0 blank, 1..8 symbols, 9 marker
COPY_LEN = 10
BLANK = 0
MARKER = 9


def copy_memory_batch(batch_size: int, T: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Draw a batch of copy-memory sequences.

    Args:
        batch_size: number of sequences, >= 1.
        T: the memory horizon (blanks between the symbols and the recall), >= 1.
        generator: source of randomness (None: torch's global generator).

    Returns:
        (inputs, targets): LongTensors of shape (batch_size, T + 20) with values in 0..9.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if T < 1:
        raise ValueError(f"the copy-memory horizon T must be >= 1, got {T}.")
    length = T + 2 * COPY_LEN
    symbols = torch.randint(1, 9, (batch_size, COPY_LEN), generator=generator)
    inputs = torch.full((batch_size, length), BLANK, dtype=torch.long)
    inputs[:, :COPY_LEN] = symbols
    inputs[:, COPY_LEN + T - 1 :] = MARKER
    targets = torch.full((batch_size, length), BLANK, dtype=torch.long)
    targets[:, -COPY_LEN:] = symbols
    return inputs, targets


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A generator seeded by (seed, step, stream), so that the batch of a step is the same after a resume and in
    every process (each process then takes its own slice of the global batch)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 7 + stream)


def copy_memory_split(n: int, T: int, seed: int) -> tuple[Tensor, Tensor]:
    """A fixed evaluation set of ``n`` sequences (inputs, targets), each (n, T + 20), drawn from ``seed``."""
    return copy_memory_batch(n, T, torch.Generator().manual_seed(seed))


def copy_memory_metrics(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Loss over all positions and accuracy over the last ten.

    Args:
        logits: (B, T + 20, 10) unnormalized scores.
        targets: (B, T + 20) LongTensor.

    Returns:
        (loss, accuracy): scalar tensors; loss is the mean cross-entropy in nats per position (differentiable),
        accuracy the fraction of the last ten positions predicted exactly (no gradient).
    """
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    with torch.no_grad():
        pred = logits[:, -COPY_LEN:].argmax(-1)
        acc = (pred == targets[:, -COPY_LEN:]).float().mean()
    return loss, acc
