"""The run folder: one run at a time (:class:`RunLock` on the folder itself), no silent restarts
(:func:`check_run_dir`: refuse to train over a run, or to resume nothing)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from .checkpoints import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    MANIFEST_FILE,
    CheckpointError,
    check_config_copy,
    checkpoint_folder,
    latest_complete_checkpoint,
    read_json,
)
from .errors import UsageError
from .files import OutputError, open_in_place, output_error

__all__ = ["RunDirError", "RunLock", "check_run_dir"]

_LOCK_FILE = ".lock"


class RunDirError(UsageError, ValueError):
    """A run folder that cannot be used as asked: locked by another run, already holding a run (without --resume),
    or holding nothing to resume (one line saying what to do)."""


class RunLock:
    """An exclusive lock on a run folder, held while a run trains in it: ``with RunLock(output_dir): ...``.

    The lock is an ``fcntl.flock`` on the folder itself, which no file deleted or replaced in it releases, and one on
    OUTPUT_DIR/.lock, the file that holds the process id of the run (and the lock where a file system cannot lock a
    folder, e.g. NFS). The operating system releases both when the process ends, however it ends. On systems without
    ``fcntl`` (Windows) it does nothing.

    Raises:
        RunDirError: another process holds the lock.
        OutputError: the folder cannot be created or written (read-only, full, not a folder), or ``.lock`` is a
            symbolic link, a hard link or not a regular file (:func:`~deq_core.train.files.open_in_place`: nothing is
            written to it).
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / _LOCK_FILE
        self._fds: list[int] = []
        self._created = False

    def __enter__(self) -> RunLock:
        if fcntl is None:  # pragma: no cover - Windows
            return self
        try:
            self._created = not self.path.parent.exists()
            self._lock()
        except RunDirError:
            self._release(remove=False)
            raise
        except OutputError:
            self._release(remove=self._created)
            raise
        except OSError as err:
            self._release(remove=self._created)
            raise output_error(self.path, err, what="its lock file") from err
        return self

    def _lock(self) -> None:
        """Lock the folder (created if missing), then .lock, and write the process id into .lock."""
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        self._fds.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        try:
            fcntl.flock(self._fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._in_use() from None
        except OSError:  # a file system that cannot lock a folder (NFS): the lock on .lock stands alone
            pass
        self._fds.append(open_in_place(self.path, os.O_RDWR | os.O_CREAT, what="its lock file"))
        try:
            fcntl.flock(self._fds[1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._in_use() from None
        os.ftruncate(self._fds[1], 0)
        os.write(self._fds[1], f"{os.getpid()}\n".encode())

    def _in_use(self) -> RunDirError:
        """The error of a folder another run holds, naming its process id as .lock says."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
        except OSError:
            holder = "?"
        return RunDirError(
            f"{self.path.parent} is in use by another training run (pid {holder}); wait for it to finish, or use "
            "another --output-dir."
        )

    def _release(self, remove: bool) -> None:
        """Close the descriptors (which releases the locks); ``remove``: delete the folder this lock created, when
        nothing but .lock is in it (a run that failed before writing anything leaves no folder behind)."""
        if remove and self.path.parent.is_dir() and {p.name for p in self.path.parent.iterdir()} <= {_LOCK_FILE}:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
                self.path.parent.rmdir()
        for fd in reversed(self._fds):
            os.close(fd)
        self._fds = []

    def __exit__(self, *exc: object) -> None:
        self._release(remove=self._created)


def check_run_dir(output_dir: str | Path, resume: bool) -> Path | None:
    """Where a run in ``output_dir`` starts: the checkpoint to resume from (``resume``), or None for a new run.

    A new run needs a folder without a complete checkpoint (a folder a run left before its first checkpoint may be
    reused: nothing in it can be resumed) and without files of someone else's that it would replace (a config.json
    that is not a run's, ...). A run resumes only with the config.json its checkpoint was trained with
    (:func:`~deq_core.train.checkpoints.check_config_copy`). Call it while holding the :class:`RunLock`.

    Raises:
        RunDirError: ``resume`` and the folder does not exist or holds no complete checkpoint; or not ``resume``
            and the folder holds a run with a checkpoint, a finished run (its checkpoints deleted), or files of
            someone else's that the run would replace.
        CheckpointError: ``resume`` and config.json was changed since the checkpoint was written.
        OutputError: OUTPUT_DIR/checkpoints is a symbolic link (:func:`~deq_core.train.checkpoints.checkpoint_folder`).
    """
    output_dir = Path(output_dir)
    checkpoint_folder(output_dir)
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
    if latest is not None:
        check_config_copy(output_dir, latest)
    else:
        _check_not_foreign(output_dir)
    return latest


_SUMMARY = "summary.json"  # written when a run finishes
_REPLACED = ("metrics.jsonl", _SUMMARY, "training.png")  # besides config.json, what a new run writes over


def _is_run_config(path: Path) -> bool:
    """Whether ``path`` is a regular file holding a run's config.json (a JSON object with a ``config`` object)."""
    try:
        data = read_json(path)
    except CheckpointError:
        return False
    return isinstance(data, dict) and isinstance(data.get("config"), dict)


def _check_not_foreign(output_dir: Path) -> None:
    """Refuse a new run in a folder whose files it would write over although no run wrote them: a config.json that is
    not a run's (or a FIFO, a device there), or, without a run's config.json, a regular file metrics.jsonl,
    summary.json or training.png (a folder there is refused when the run writes it). Refuse it too over a run that
    finished (its summary.json) and whose checkpoints were deleted: its results would be lost. Symbolic links are the
    run's to replace (never written through); a folder left by a run that stopped before its first checkpoint holds a
    run's config.json and no summary.json, and may be reused."""
    config = output_dir / CONFIG_FILE
    if config.is_file() and not config.is_symlink() and _is_run_config(config):
        summary = output_dir / _SUMMARY
        if summary.is_file() and not summary.is_symlink():
            raise RunDirError(
                f"{output_dir} holds a run that finished ({_SUMMARY}) and whose checkpoints are gone; a new run would "
                f"replace its metrics and {_SUMMARY}: move them away, or train in another --output-dir."
            )
        return
    names = [name for name in _REPLACED if (output_dir / name).is_file() and not (output_dir / name).is_symlink()]
    if config.exists() and not config.is_symlink():
        names.insert(0, CONFIG_FILE)
    if names:
        raise RunDirError(
            f"{output_dir} holds files that a new run would replace and that no run wrote ({', '.join(names)}): move "
            "them away, or train in a new or empty folder (another --output-dir)."
        )
