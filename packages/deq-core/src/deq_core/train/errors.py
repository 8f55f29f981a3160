"""The one error type of a user's mistake in the training tools: :class:`UsageError`."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """Something the user can fix: an unknown config name, a bad override, a missing or malformed data file, a run
    folder that cannot be used as asked, a checkpoint that is not one of this project's.

    The message is one line saying what is wrong and how to fix it; the command-line tools (``python -m
    deq_X.train``, ``evaluate``, ``reproduce``) print it without a traceback and exit with status 2. The errors of
    the task packages and of :mod:`deq_core.train` that mean this are subclasses (e.g.
    :class:`~deq_core.train.checkpoints.CheckpointError`, which is also a ``ValueError``).
    """
