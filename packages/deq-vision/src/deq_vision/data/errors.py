"""The one error type of the data loaders."""

from __future__ import annotations

from deq_core.train.errors import UsageError

WORKER_PREFIX = "DatasetError: "


class DatasetError(UsageError, FileNotFoundError):
    """A dataset is missing or malformed. The message says which files were expected and where to put them.

    The message is one line, also when the error comes from a DataLoader worker process: the worker's re-raise
    (``Caught DatasetError in DataLoader worker process 0. Original Traceback ...``) is reduced to the original
    message, the last line of that traceback.
    """

    def __init__(self, message: str) -> None:
        lines = [line for line in str(message).splitlines() if line.strip()]
        if len(lines) > 1 and WORKER_PREFIX in lines[-1]:
            message = lines[-1].split(WORKER_PREFIX, 1)[1]
        super().__init__(message)
