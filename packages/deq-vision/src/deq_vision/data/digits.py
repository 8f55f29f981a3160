"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, offline), as 1-channel PIL images for the CPU-scale
result. A fixed, stratified 80/20 split (seed 0): 1,438 training and 359 test images."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .arrays import ArrayImages
from .errors import DatasetError


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) uint8 in 0..255, labels (1797,) int64).

    Raises:
        DatasetError: scikit-learn is not installed (``pip install deq-vision[digits]``).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise DatasetError(
            "the digits dataset comes with scikit-learn: pip install 'deq-vision[digits]' (or scikit-learn)."
        ) from err
    bunch = load_digits()
    images = np.clip(bunch.images * (255.0 / 16.0), 0, 255).round().astype(np.uint8)
    return images, bunch.target.astype(np.int64)


def split_indices(labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, test) index arrays: the same fraction of every class goes to the test split."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(len(idx) * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


class Digits(ArrayImages):
    """Digits split as (PIL "L" image 8x8, label) pairs, after ``transform`` (which resizes, e.g. to 16x16)."""

    def __init__(self, train: bool = True, transform: Callable[[Any], Any] | None = None) -> None:
        images, labels = load_digits_arrays()
        train_idx, test_idx = split_indices(labels)
        idx = train_idx if train else test_idx
        self.images, self.targets = images[idx], labels[idx]
        self.transform = transform
