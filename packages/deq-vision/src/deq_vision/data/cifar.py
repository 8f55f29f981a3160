"""CIFAR-10 from the standard ``cifar-10-batches-py`` folder, read with our own pickle reader.

torchvision's ``CIFAR10`` checks the md5 sums of the official files (so it rejects small test folders); we read the
same format directly and use torchvision only to download, when asked explicitly.

Expected layout::

    DATA_DIR/cifar-10-batches-py/data_batch_1 ... data_batch_5, test_batch   (python pickles)

each a dict with b"data" (N, 3072) uint8 in CHW order and b"labels" (N,) ints in 0..9.

A batch is read with :class:`BatchUnpickler`, which admits only the numpy globals an array pickles through: a file
that names any other global (a planted pickle that would run code when read) is refused before anything in it runs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

# numpy 1.x names these "numpy.core..." in its pickles, numpy 2.x "numpy._core..."; both spellings are admitted below.
try:  # numpy 2.x
    from numpy._core.multiarray import _reconstruct
    from numpy._core.numeric import _frombuffer
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct
    from numpy.core.numeric import _frombuffer

from .arrays import ArrayImages
from .errors import DatasetError
from .regular import open_regular

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _array_type(*args: Any) -> None:
    """What a batch's ``numpy.ndarray`` stands for: only the first argument of :func:`_empty_array`. Called, it would
    allocate an array of any shape the file names, so it refuses."""
    raise ValueError("it calls numpy.ndarray, which would allocate an array of the size the file names")


def _empty_array(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's ``_reconstruct`` as numpy's own pickles call it: an empty array, ``_reconstruct(ndarray, (0,), b'b')``,
    which ndarray's ``__setstate__`` then fills with bytes of the file (of the size its shape needs, or refused).
    Another shape would allocate memory for an array the file need not hold (2**40 bytes from a few bytes)."""
    if subtype is not _array_type or tuple(shape) != (0,):
        raise ValueError(f"it asks numpy for an array of shape {shape!r} before reading its data")
    return _reconstruct(np.ndarray, (0,), dtype)


def _plain_dtype(*args: Any) -> np.dtype:
    """``numpy.dtype(...)`` of a batch, refusing Python objects: an object array is filled from a list, after
    allocating its shape, and a batch holds only numbers."""
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise ValueError(f"it holds an array of Python objects (dtype {dtype})")
    return dtype


# The only globals a batch may name: what numpy pickles an array through. Protocols 0-4 (the official files: Python 2,
# protocol 2, numpy 1.x): _reconstruct(ndarray, (0,), b'b') with a numpy.dtype, the raw bytes restored by ndarray's
# __setstate__; protocol 5 (Python 3.14's default, pickle.HIGHEST_PROTOCOL): _frombuffer(bytes, dtype, shape, order),
# i.e. numpy.frombuffer(...).reshape(...), which refuses object arrays. None of them runs code, and none allocates more
# than the file holds: ndarray and _reconstruct are admitted only as numpy's pickles use them, object dtypes not at all
# (:func:`_array_type`, :func:`_empty_array`, :func:`_plain_dtype`). Everything else of a batch (dict, list, int,
# bytes, str) needs no global.
ARRAY_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _array_type,
    ("numpy", "dtype"): _plain_dtype,
    **{(f"{core}.multiarray", "_reconstruct"): _empty_array for core in ("numpy.core", "numpy._core")},
    **{(f"{core}.numeric", "_frombuffer"): _frombuffer for core in ("numpy.core", "numpy._core")},
}
# How a refused global is shown (a name in a planted file may be long or hold newlines).
SHOWN_NAME_CHARS = 100
# What unpickling a damaged file can raise besides UnpicklingError (e.g. numpy's own checks of an array's state).
_DAMAGED = (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError)


def _where(data_dir: Path) -> str:
    return (
        f"put the CIFAR-10 python batches in {data_dir / FOLDER}/ (data_batch_1..5, test_batch; from "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) or pass --download"
    )


class BatchUnpickler(pickle.Unpickler):
    """Unpickler of one CIFAR-10 python batch that resolves only :data:`ARRAY_GLOBALS`, so reading a file never
    imports or calls anything else (``os.system``, ``builtins.open``, ... in a planted file).

    Args:
        file: the open batch file (binary).
        path: its path, for the error message.
    """

    def __init__(self, file: BinaryIO, path: Path) -> None:
        super().__init__(file, encoding="bytes")  # the official files come from Python 2: their str stays bytes
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        """The admitted numpy global ``module.name``.

        Raises:
            DatasetError: any other global, named in a one-line message; nothing of it was imported.
        """
        found = ARRAY_GLOBALS.get((module, name))
        if found is None:
            shown = f"{module}.{name}"
            if len(shown) > SHOWN_NAME_CHARS:
                shown = shown[:SHOWN_NAME_CHARS] + "..."
            raise DatasetError(
                f"{self.path} is not an official CIFAR-10 python batch: it names the Python global {shown!r}, and "
                "reading it could run code, so it was not read; a batch may hold only a dict of a numpy uint8 array "
                "b'data' (N, 3072) and a list of ints b'labels', pickled with protocol 3 or higher; use the official "
                "files (https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) or rewrite this one so."
            )
        return found


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch -> (images (N, 32, 32, 3) uint8 HWC, labels (N,) int64), read with :class:`BatchUnpickler`.

    Raises:
        DatasetError: unreadable file, a global other than numpy's array reconstruction in it (refused before it
            runs), missing keys, or data of the wrong size or type.
    """
    try:
        with open_regular(path, "is named like a CIFAR-10 batch", f"replace it with the batch file {path.name}") as fh:
            entry = BatchUnpickler(fh, path).load()
    except DatasetError:
        raise
    except _DAMAGED as err:
        raise DatasetError(f"{path} is not a CIFAR-10 python batch ({err}).") from err
    if not isinstance(entry, dict):
        raise DatasetError(f"{path} is not a CIFAR-10 python batch (expected a dict, got {type(entry).__name__}).")
    data = entry.get(b"data", entry.get("data"))
    labels = entry.get(b"labels", entry.get("labels"))
    if data is None or labels is None:
        raise DatasetError(f"{path} has no 'data' / 'labels' entries: not a CIFAR-10 python batch.")
    try:
        data = np.asarray(data, dtype=np.uint8)
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as err:
        raise DatasetError(f"{path}: 'data' / 'labels' are not numbers ({err}): not a CIFAR-10 python batch.") from err
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

            try:
                TorchvisionCIFAR10(str(data_dir), train=train, download=True)
            except (OSError, RuntimeError) as err:  # URLError is an OSError; a failed checksum a RuntimeError
                raise DatasetError(
                    f"could not download CIFAR-10 into {data_dir} ({err}); check the network connection (or proxy), "
                    f"or put the files there yourself: {_where(data_dir)}."
                ) from err
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
