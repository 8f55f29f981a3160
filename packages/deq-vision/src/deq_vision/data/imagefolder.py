"""Image folders: ``DATA_DIR/train/<class>/<image>`` and ``DATA_DIR/val/<class>/<image>`` (torchvision's ImageFolder
layout, e.g. ImageNet's ILSVRC-2012 train / val images).

The classes and their indices come from the training split (its class folders, sorted); the validation split uses
the same indices, so a validation folder that lacks a class keeps every other label right, and a validation class
unknown to training is an error. Unreadable image files raise :class:`DatasetError` naming the file: before training
(:func:`check_image_files`) small selections are decoded whole and larger ones have their headers read, and a file
that fails to decode later is reported the same way. Only regular files are opened as images (also through a link):
anything else named like one (a FIFO, whose reading would wait for a writer forever, a device, a socket) is an error
naming it.

Symlinks: a class folder may itself be a symlink (e.g. to a dataset shared between users), and so may any image file
inside it: a linked file is one image of the class folder it is linked into. A symlink to a directory inside a class
folder is refused (:func:`refuse_directory_links`): torchvision's ImageFolder follows them, so ``ant/loop -> ..``
walks the whole split again and again (every class's images labelled "ant") and a link to another class's folder
mislabels its images; link the image files, or the class folder itself, instead.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from PIL import Image
from torchvision.datasets import ImageFolder

from .errors import DatasetError
from .regular import open_regular

SPLITS = ("train", "val")
# Before training, up to DECODE_CHECK_LIMIT files of a split are decoded (~5 ms each for ImageNet-sized JPEGs), up to
# HEADER_CHECK_LIMIT have their header read (~0.1 ms each); beyond that (full ImageNet) only loading reports a file.
DECODE_CHECK_LIMIT = 2_000
HEADER_CHECK_LIMIT = 200_000
_PIL_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)


def _layout(data_dir: Path) -> str:
    return f"expected {data_dir}/train/<class>/<image> and {data_dir}/val/<class>/<image>"


def class_folders(data_dir: str | Path, split: str = "train") -> list[str]:
    """Sorted names of the class folders of ``split`` (what ImageFolder takes as classes).

    Raises:
        DatasetError: the split folder is missing or has no class folders.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}.")
    root = Path(data_dir) / split
    if not root.is_dir():
        raise DatasetError(f"image folder {root} not found: {_layout(Path(data_dir))} (ImageNet: the ILSVRC-2012 "
                           "train/val images).")  # fmt: skip
    names = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    if not names:
        raise DatasetError(f"{root} has no class folders: {_layout(Path(data_dir))}.")
    return names


def open_image_file(path: str) -> BinaryIO:
    """The image file ``path`` opened for reading, when it is a regular file (also through a link to one): a FIFO
    cannot block (:func:`~deq_vision.data.regular.open_regular`).

    Raises:
        DatasetError: ``path`` is not a regular file (a FIFO, a device, a socket).
        OSError: the file cannot be opened.
    """
    return open_regular(path, "is named like an image", "remove it from the image folder")


def load_image(path: str) -> Image.Image:
    """The image file ``path`` as a PIL RGB image.

    Raises:
        DatasetError: the file is not a regular file (:func:`open_image_file`), or cannot be read or decoded (the
            message names it).
    """
    try:
        with open_image_file(path) as fh:
            return Image.open(fh).convert("RGB")
    except DatasetError:  # (an OSError too)
        raise
    except _PIL_ERRORS as err:
        raise DatasetError(f"{path} is not a readable image ({err}); remove or replace the file.") from err


def refuse_directory_links(class_dir: Path) -> None:
    """Raise DatasetError if ``class_dir`` holds a symlink to a directory at any depth (see the module's docstring).

    The folder is walked without following links, so a loop cannot make the check itself run away; links to files
    (also broken ones, reported when loaded) are allowed.

    Raises:
        DatasetError: naming the first such link (in sorted walk order), its target and what to do instead.
    """
    for folder, subfolders, _ in sorted(os.walk(class_dir)):
        for name in sorted(subfolders):
            link = Path(folder) / name
            if link.is_symlink():
                raise DatasetError(
                    f"{link} is a symlink to a directory ({os.readlink(link)}) inside the class folder {class_dir}: "
                    "directory links are not followed (a link to .. loops, one to another class mislabels its "
                    "images); replace it with the directory itself, or link the image files or the class folder."
                )


class _LinkCheckedFolder(ImageFolder):
    """ImageFolder that first refuses symlinks to directories inside its class folders."""

    @staticmethod
    def make_dataset(
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        """torchvision's (path, class index) samples, after :func:`refuse_directory_links` on each class folder.

        Raises:
            DatasetError: a symlink to a directory in a class folder.
        """
        for name in sorted(class_to_idx):
            if (Path(directory) / name).is_dir():
                refuse_directory_links(Path(directory) / name)
        return ImageFolder.make_dataset(directory, class_to_idx, extensions, is_valid_file, allow_empty)


class _ClassFolder(_LinkCheckedFolder):
    """ImageFolder whose class -> index map is given (the training split's) instead of read from its own folders."""

    def __init__(self, root: Path, transform: Callable[[Any], Any] | None, class_to_idx: dict[str, int]) -> None:
        self._given = dict(class_to_idx)
        super().__init__(str(root), transform=transform, loader=load_image, allow_empty=True)

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        return sorted(self._given, key=self._given.__getitem__), dict(self._given)


def image_folder(
    data_dir: str | Path,
    split: str,
    transform: Callable[[Any], Any] | None = None,
    class_to_idx: dict[str, int] | None = None,
) -> ImageFolder:
    """The ``split`` ("train" or "val") of an image-folder dataset under ``data_dir``; items (image, class index).

    Args:
        class_to_idx: the class indices to use (give the training split's ``class_to_idx`` for "val"); None: the
            split's own sorted class folders, each of which must hold images.

    Raises:
        DatasetError: the split folder is missing, has no class folders or no image files, a class folder holds a
            symlink to a directory, or (with ``class_to_idx``) the split has class folders that are not in it.
    """
    names = class_folders(data_dir, split)
    root = Path(data_dir) / split
    if class_to_idx is not None:
        unknown = [name for name in names if name not in class_to_idx]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise DatasetError(
                f"{root} has class folders that {Path(data_dir) / 'train'} lacks: {shown}; every {split} class "
                "must also be a training class (remove them or add their training images)."
            )
    try:
        if class_to_idx is None:
            dataset = _LinkCheckedFolder(str(root), transform=transform, loader=load_image)
        else:
            dataset = _ClassFolder(root, transform, class_to_idx)
    except DatasetError:
        raise
    except (FileNotFoundError, RuntimeError) as err:
        raise DatasetError(f"{root} has no readable images ({err}); {_layout(Path(data_dir))}.") from err
    if len(dataset) == 0:
        raise DatasetError(f"{root} has no image files; {_layout(Path(data_dir))}.")
    return dataset


def check_image_files(paths: Sequence[str], decode_limit: int | None = None, header_limit: int | None = None) -> str:
    """Check that the image files ``paths`` can be read: decode them all when there are at most ``decode_limit``
    (None: DECODE_CHECK_LIMIT), else read their headers (which finds files that are empty, cut in their header or not
    images) when there are at most ``header_limit`` (None: HEADER_CHECK_LIMIT), else nothing (loading still reports a
    bad file). Returns "decoded", "headers" or "none".

    Raises:
        DatasetError: naming the unreadable files (the first three) and how many there are; or the first path that is
            not a regular file (:func:`open_image_file`).
    """
    if len(paths) > (HEADER_CHECK_LIMIT if header_limit is None else header_limit):
        return "none"
    decode = len(paths) <= (DECODE_CHECK_LIMIT if decode_limit is None else decode_limit)
    bad: list[str] = []
    for path in paths:
        try:
            with open_image_file(path) as fh, Image.open(fh) as image:
                if decode:
                    image.load()
        except DatasetError:
            raise
        except _PIL_ERRORS as err:
            bad.append(f"{path} ({err})")
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise DatasetError(f"{len(bad)} unreadable image file(s): {'; '.join(bad[:3])}{more}; remove or replace them.")
    return "decoded" if decode else "headers"
