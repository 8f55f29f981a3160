"""Opening a data file that must be a regular file: a FIFO, a device or a socket of the same name would block a
reader forever, or feed it without end, so it is refused in one line before anything is read."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import DatasetError

__all__ = ["open_regular"]

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def open_regular(path: str | Path, what: str, fix: str) -> BinaryIO:
    """The file ``path`` opened for reading (binary), when it is a regular file (also through a link to one). It is
    opened without waiting (``O_NONBLOCK``), so that a FIFO cannot block, then set back to blocking reads.

    Args:
        path: the file.
        what: what the file is taken for, for the message ("is named like an image").
        fix: what the user should do, for the message ("remove it from the image folder").

    Raises:
        DatasetError: ``path`` is not a regular file (a FIFO, a device, a socket).
        OSError: the file cannot be opened.
    """
    fd = os.open(path, _READ_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DatasetError(
            f"{path} is not a regular file but {what} (a FIFO, a device or a socket, which could block reading "
            f"forever); {fix}."
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
