"""CIFAR-10 from the standard ``cifar-10-batches-py`` folder, read with our own pickle reader.

torchvision's ``CIFAR10`` checks the md5 sums of the official files (so it rejects small test folders); we read the
same format directly and use torchvision only to download, when asked explicitly.

Expected layout::

    DATA_DIR/cifar-10-batches-py/data_batch_1 ... data_batch_5, test_batch   (python pickles)

each a dict with b"data" (N, 3072) uint8 in CHW order and b"labels" (N,) ints in 0..9.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import ArrayImages
from .errors import DatasetError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _where(data_dir: Path) -> str:
    return (
        f"put the CIFAR-10 python batches in {data_dir / FOLDER}/ (data_batch_1..5, test_batch; from "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) or pass --download"
    )


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch -> (images (N, 32, 32, 3) uint8 HWC, labels (N,) int64).

    Raises:
        DatasetError: unreadable file, missing keys, or data of the wrong size.
    """
    try:
        with path.open("rb") as fh:
            entry = pickle.load(fh, encoding="bytes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as err:
        raise DatasetError(f"{path} is not a CIFAR-10 python batch ({err}).") from err
    if not isinstance(entry, dict):
        raise DatasetError(f"{path} is not a CIFAR-10 python batch (expected a dict, got {type(entry).__name__}).")
    data = entry.get(b"data", entry.get("data"))
    labels = entry.get(b"labels", entry.get("labels"))
    if data is None or labels is None:
        raise DatasetError(f"{path} has no 'data' / 'labels' entries: not a CIFAR-10 python batch.")
    data = np.asarray(data, dtype=np.uint8)
    labels = np.asarray(labels, dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
        raise DatasetError(
            f"{path}: data of shape {data.shape} with {labels.shape[0]} labels; expected (N, 3072) and N labels."
        )
    if labels.size and (labels.min() < 0 or labels.max() >= len(CLASSES)):
        raise DatasetError(f"{path}: labels outside 0..9.")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy(), labels


class CIFAR10(ArrayImages):
    """CIFAR-10 split as (PIL RGB image 32x32, label) pairs, after ``transform``.

    Args:
        data_dir: the folder that contains ``cifar-10-batches-py``.
        train: the five training batches (50,000 images) or the test batch (10,000).
        transform: applied to each PIL image (e.g. timm's ``create_transform``).
        download: fetch the official archive through torchvision first (network needed).

    Raises:
        DatasetError: the folder or a batch is missing or malformed; the message says where to put the files.
    """

    def __init__(
        self, data_dir: str | Path, train: bool = True, transform: Callable[[Any], Any] | None = None,
        download: bool = False,
    ) -> None:  # fmt: skip
        data_dir = Path(data_dir)
        if download:
            from torchvision.datasets import CIFAR10 as TorchvisionCIFAR10

            TorchvisionCIFAR10(str(data_dir), train=train, download=True)
        folder = data_dir / FOLDER
        files = TRAIN_FILES if train else TEST_FILES
        missing = [name for name in files if not (folder / name).is_file()]
        if missing:
            raise DatasetError(f"CIFAR-10 files {missing} not found in {folder}: {_where(data_dir)}.")
        parts = [read_batch(folder / name) for name in files]
        self.images = np.concatenate([p[0] for p in parts])
        self.targets = np.concatenate([p[1] for p in parts])
        self.transform = transform
        self.classes = CLASSES


def write_cifar_folder(data_dir: str | Path, images: np.ndarray, labels: np.ndarray, train_parts: int = 5) -> Path:
    """Write a CIFAR-format folder (for tests and examples): ``images`` (N, 32, 32, 3) uint8, ``labels`` (N,).

    The first 5/6 of the images are spread over ``train_parts`` training batches, the rest is the test batch.
    Returns the ``cifar-10-batches-py`` folder.
    """
    folder = Path(data_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    flat = np.asarray(images, dtype=np.uint8).transpose(0, 3, 1, 2).reshape(len(images), -1)
    n_train = len(images) * 5 // 6
    chunks = np.array_split(np.arange(n_train), train_parts)
    for i, idx in enumerate(chunks, start=1):
        with (folder / f"data_batch_{i}").open("wb") as fh:
            pickle.dump({b"data": flat[idx], b"labels": [int(v) for v in labels[idx]]}, fh)
    with (folder / "test_batch").open("wb") as fh:
        pickle.dump({b"data": flat[n_train:], b"labels": [int(v) for v in labels[n_train:]]}, fh)
    return folder
