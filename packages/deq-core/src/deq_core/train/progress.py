"""Whether a training script shows its progress bar (:func:`progress_enabled`)."""

from __future__ import annotations

import os
import sys
import typing

__all__ = ["progress_enabled"]


def progress_enabled(is_main: bool, stream: typing.TextIO | None = None) -> bool:
    """Whether a training script should draw its progress bar (pass ``disable=not progress_enabled(...)`` to tqdm).

    False on every process but the main one, when the environment sets ``TQDM_DISABLE`` (to anything but "", "0",
    "false", "no" or "off"; tqdm itself ignores it once a script passes ``disable=``), and when ``stream`` (default
    ``sys.stderr``, where tqdm draws) is not a terminal, so that logs written to a file or a pipe hold no
    carriage-return redraws. Lines written with ``tqdm.write`` still appear.
    """
    if not is_main:
        return False
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())
