"""A dataset held in memory as uint8 image arrays with integer labels (CIFAR-10, digits, glyphs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset


class ArrayImages(Dataset):
    """(PIL image, label) pairs from ``images`` (N, H, W) or (N, H, W, C) uint8 and ``targets`` (N,) int64, each
    image passed through ``transform`` (e.g. timm's ``create_transform``). Subclasses load the arrays."""

    images: np.ndarray
    targets: np.ndarray
    transform: Callable[[Any], Any] | None

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image: Any = Image.fromarray(self.images[index])  # 2-D uint8 -> mode "L", (H, W, 3) -> "RGB"
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])
