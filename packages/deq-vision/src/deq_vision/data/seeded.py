"""Augmentation whose randomness is a function of (seed, epoch, index), so that a resumed run augments exactly as an
uninterrupted one (the data loader prepares batches ahead of the step being trained, so drawing from the global
random generators there would make the generators saved with a checkpoint depend on how far it has read)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


class SeededItems(Dataset):
    """``dataset`` with item ``index`` of epoch ``epoch`` produced under Python's, NumPy's and torch's (CPU) random
    generators seeded from (seed, epoch, index); the generators' previous states are restored afterwards, so reading
    items draws nothing from the training loop's generators. The data loader calls :meth:`set_epoch`."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        seed = random.Random(f"{self.seed}/{self.epoch}/{index}").getrandbits(63)
        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            random.seed(seed)
            np.random.seed(seed % 2**32)
            torch.default_generator.manual_seed(seed)
            return self.dataset[index]
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])

    def __getattr__(self, name: str) -> Any:  # e.g. ``classes`` of the wrapped dataset
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)
