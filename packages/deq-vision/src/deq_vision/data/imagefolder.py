"""ImageNet-style data: ``DATA_DIR/train/<class>/*.JPEG`` and ``DATA_DIR/val/<class>/*.JPEG`` (torchvision's
ImageFolder layout; the same class folders in both splits)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchvision.datasets import ImageFolder

from .errors import DatasetError

SPLITS = {"train": "train", "val": "val"}


def image_folder(data_dir: str | Path, split: str, transform: Callable[[Any], Any] | None = None) -> ImageFolder:
    """The ``split`` ("train" or "val") of an ImageFolder dataset under ``data_dir``; items (image, class index).

    Raises:
        DatasetError: the split folder is missing, has no class folders, or no image files.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}.")
    root = Path(data_dir) / SPLITS[split]
    layout = f"expected {Path(data_dir)}/train/<class>/<image> and {Path(data_dir)}/val/<class>/<image>"
    if not root.is_dir():
        raise DatasetError(f"image folder {root} not found: {layout} (ImageNet: the ILSVRC-2012 train/val images).")
    if not any(p.is_dir() for p in root.iterdir()):
        raise DatasetError(f"{root} has no class folders: {layout}.")
    try:
        return ImageFolder(str(root), transform=transform)
    except (FileNotFoundError, RuntimeError) as err:
        raise DatasetError(f"{root} has no readable images ({err}); {layout}.") from err
