"""The run folder: one run at a time (:class:`RunLock` on OUTPUT_DIR/.lock), no silent restarts
(:func:`check_run_dir`: refuse to train over a run, or to resume nothing)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .checkpoints import CHECKPOINT_DIR, MANIFEST_FILE, latest_complete_checkpoint
from .errors import UsageError
from .files import output_error

__all__ = ["RunDirError", "RunLock", "check_run_dir"]

_LOCK_FILE = ".lock"


class RunDirError(UsageError, ValueError):
    """A run folder that cannot be used as asked: locked by another run, already holding a run (without --resume),
    or holding nothing to resume (one line saying what to do)."""


class RunLock:
    """An exclusive lock on a run folder (``fcntl.flock`` on OUTPUT_DIR/.lock), held while a run trains in it:
    ``with RunLock(output_dir): ...``. The operating system releases it when the process ends, however it ends.
    On systems without ``fcntl`` (Windows) it does nothing.

    Raises:
        RunDirError: another process holds the lock.
        OutputError: the folder cannot be created or written (read-only, full, not a folder), or ``.lock`` is a
            symbolic link (opened with ``O_NOFOLLOW``: nothing is written through it).
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / _LOCK_FILE
        self._fd: int | None = None
        self._created = False

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        self._created = not self.path.parent.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if self._created:
                shutil.rmtree(self.path.parent, ignore_errors=True)  # nothing of a run is in a folder made here
            raise output_error(self.path, err, what="its lock file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirError(
                f"{self.path.parent} is in use by another training run (pid {holder}); wait for it to finish, or "
                "use another --output-dir."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as err:
            os.close(fd)
            raise output_error(self.path, err, what="its lock file") from None
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        if self._created and [p.name for p in self.path.parent.iterdir()] == [_LOCK_FILE]:
            self.path.unlink()  # a run that failed before writing anything leaves no folder behind
            self.path.parent.rmdir()
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None


def check_run_dir(output_dir: str | Path, resume: bool) -> Path | None:
    """Where a run in ``output_dir`` starts: the checkpoint to resume from (``resume``), or None for a new run.

    A new run needs a folder without a complete checkpoint (a folder a run left before its first checkpoint may be
    reused: nothing in it can be resumed). Call it while holding the :class:`RunLock`.

    Raises:
        RunDirError: ``resume`` and the folder does not exist or holds no complete checkpoint; or not ``resume``
            and the folder holds a run with a checkpoint.
    """
    output_dir = Path(output_dir)
    latest = latest_complete_checkpoint(output_dir)
    if resume and latest is None:
        manifests = (output_dir / CHECKPOINT_DIR).glob(f"step_*/{MANIFEST_FILE}")
        broken = sorted(p for p in manifests if p.parent.name[5:].isdigit())  # not a .partial save's
        found = f" ({broken[-1]} is not a valid manifest: an interrupted save, or a modified file)" if broken else ""
        raise RunDirError(
            f"--resume: no complete checkpoint in {output_dir / CHECKPOINT_DIR} (or no such folder){found}; run "
            "without --resume to start a new run there."
        )
    if not resume and latest is not None:
        raise RunDirError(
            f"{output_dir} already holds a run (checkpoint {latest.name}); pass --resume to continue it, or use "
            "another --output-dir."
        )
    return latest
