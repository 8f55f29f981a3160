"""Tasks: what the training loop needs to know about the data (batches per step, evaluation sets, loss, metric).

Part 1 has the copy-memory task; the word-level corpora add a task with the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .configs.config import Config
from .data.copy_memory import N_SYMBOLS, copy_memory_batch, copy_memory_metrics, copy_memory_split, step_generator

SPLIT_SEEDS = {"valid": 1, "test": 2}


@dataclass(frozen=True)
class CopyMemoryTask:
    """Copy memory with horizon ``T``: fresh training batches every step, fixed valid/test sets.

    The global batch of a step depends only on (seed, step), so a resumed run and a run split over processes see
    the same sequences; each process takes its contiguous slice.
    """

    T: int
    seed: int
    n_valid: int
    n_test: int

    metric: str = "acc"  # accuracy over the last ten positions
    vocab_size: int = N_SYMBOLS
    stateful: bool = False  # sequences are independent: no memory carried across steps

    @classmethod
    def from_config(cls, cfg: Config) -> CopyMemoryTask:
        return cls(T=cfg.T, seed=cfg.seed, n_valid=cfg.n_valid, n_test=cfg.n_test)

    @property
    def seq_len(self) -> int:
        return self.T + 20

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> tuple[Tensor, Tensor]:
        """This process's slice (batch_size // world rows) of the global batch of ``step``: (inputs, targets),
        LongTensors (rows, T + 20)."""
        if batch_size % world:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by the number of processes ({world}).")
        inputs, targets = copy_memory_batch(batch_size, self.T, step_generator(self.seed, step))
        rows = batch_size // world
        return inputs[rank * rows : (rank + 1) * rows], targets[rank * rows : (rank + 1) * rows]

    def eval_set(self, split: str) -> tuple[Tensor, Tensor]:
        """The fixed ``split`` ("valid" or "test") set: (inputs, targets), (n, T + 20)."""
        if split not in SPLIT_SEEDS:
            raise ValueError(f"unknown split {split!r}; choose one of {list(SPLIT_SEEDS)}.")
        n = self.n_valid if split == "valid" else self.n_test
        return copy_memory_split(n, self.T, seed=10_000 * SPLIT_SEEDS[split] + self.seed)

    def loss_and_metric(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(mean cross-entropy over all positions, accuracy over the last ten) as scalar tensors."""
        return copy_memory_metrics(logits, targets)


def build_task(cfg: Config) -> CopyMemoryTask:
    """The task named by ``cfg.task``."""
    if cfg.task == "copy_memory":
        return CopyMemoryTask.from_config(cfg)
    raise ValueError(f"unknown task {cfg.task!r}")  # unreachable: Config checks the name
