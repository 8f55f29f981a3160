"""Writing the files of a run folder (and every other output of the training tools) so that a failure is one line
and nothing outside the folder is ever written.

- :func:`write_file`, :func:`write_bytes`, :func:`write_text`, :func:`write_json`: a new file written aside (a
  temporary file created in the destination's folder, never through a link), flushed to disk, then renamed over the
  destination with ``os.replace``: a symbolic link at the destination is replaced, never written through, and a
  reader sees the old file or the new one, never half of one.
- :func:`append_text`: append to a file (``metrics.jsonl``) opened in place by :func:`open_in_place`: a symbolic
  link, a hard link (a file that also has a name elsewhere) or anything but a regular file there is refused.
- :func:`read_bytes`: read a run's own file, refusing a symbolic link and anything but a regular file
  (:func:`not_regular`: a folder, a FIFO).
- :func:`check_writable`: fail at once, before a long computation, when its outputs could not be written;
  :func:`check_new_folder`: the same for a folder :func:`write_folder` is to create.
- :class:`OutputError` (a :class:`~deq_core.train.errors.UsageError` and an ``OSError``): a write that failed, one
  line saying why (no space left, with the space needed; a read-only or missing folder; a symbolic link) and what to
  do; :func:`output_error` builds it from the exception a write raised.

A run folder given by the user (``--output-dir``) may itself be a symbolic link: that is the user's choice; the
files inside it are the run's own.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

from .errors import UsageError

__all__ = ["OutputError", "append_text", "check_new_folder", "check_writable", "not_regular", "open_in_place",
           "output_error", "read_bytes", "write_bytes", "write_file", "write_folder", "write_json",
           "write_text"]  # fmt: skip

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # 0 on Windows, which has no such flag (links there need privileges)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_NEARLY_FULL = 1 << 20  # bytes free below which a write that failed without an errno is taken for a full disk


class OutputError(UsageError, OSError):
    """A file that could not be written: no space left on its device, a folder that cannot be written (read-only,
    missing, not a folder), or a symbolic link where the run keeps a file of its own. The message is one line that
    says which folder, why, and what to do; the command-line tools print it and exit with status 2."""


def _human(size: int) -> str:
    """``size`` bytes in words: ``532 bytes``, ``1.2 MB``."""
    if size < 1000:
        return f"{size} bytes"
    power = min((len(str(size)) - 1) // 3, 4)
    return f"{size / 1000**power:.1f} {('kB', 'MB', 'GB', 'TB')[power - 1]}"


def _os_error(err: BaseException) -> OSError | None:
    """The first OSError in ``err`` and the exceptions it was raised from or while handling (torch reports a failed
    write to a Python file object as a RuntimeError raised while handling the OSError). An :class:`OutputError` that
    was raised from an OSError (a file of a folder being written) stands for that OSError, so that the folder's
    message says what failed, not the file's message again."""
    seen: set[int] = set()
    current: BaseException | None = err
    wrapper: OSError | None = None
    while current is not None and id(current) not in seen:
        if isinstance(current, OutputError):
            wrapper = wrapper or current
        elif isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return wrapper


def _nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < _NEARLY_FULL
    except OSError:
        return False


def _existing_parent(path: Path) -> Path:
    """``path``'s folder, or the nearest of its ancestors that exists (for the free space of its device)."""
    folder = path.parent
    while not os.path.exists(folder) and folder != folder.parent:  # (a name too long to probe: False)
        folder = folder.parent
    return folder


@overload
def output_error(
    path: str | Path,
    err: OSError,
    *,
    what: str | None = None,
    needed: str | None = None,
    option: str = "--output-dir",
    full_fix: str | None = None,
) -> OutputError: ...


@overload
def output_error(
    path: str | Path,
    err: BaseException,
    *,
    what: str | None = None,
    needed: str | None = None,
    option: str = "--output-dir",
    full_fix: str | None = None,
) -> OutputError | None: ...


def output_error(
    path: str | Path,
    err: BaseException,
    *,
    what: str | None = None,
    needed: str | None = None,
    option: str = "--output-dir",
    full_fix: str | None = None,
) -> OutputError | None:
    """The one-line :class:`OutputError` for ``err``, raised while writing ``path``; None when ``err`` is not a
    failure to write (re-raise it as it is), which an ``OSError`` always is.

    A write failed for lack of space when an ``OSError`` with ``ENOSPC`` / ``EDQUOT`` is in the chain of ``err``, or
    when a writer that reports no errno (``torch.save`` to a file name, safetensors) failed and the device has less
    than 1 MB free.

    Args:
        path: the file (or folder) being written.
        err: what the write raised.
        what: what was written, for the message (default: the file name).
        needed: the space it needs, for the message of a full device (e.g. ``"1.2 MB"``).
        option: the command-line option that chooses the destination, named in the fix.
        full_fix: what to do when the device is full (default: free space there or choose another ``option``).
    """
    path = Path(path)
    folder = path.parent
    what = what or path.name
    found = _os_error(err)
    if found is None:
        if not _nearly_full(_existing_parent(path)):
            return None
        code, reason = errno.ENOSPC, "No space left on device"
    else:
        code, reason = found.errno, found.strerror or str(found)
    if code in _FULL:
        space = f", which needs {needed}" if needed else ""
        fix = full_fix or f"free space there or choose another {option}"
        return OutputError(f"no space left on the device of {folder} to write {what}{space}; {fix}.")
    if code in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):  # O_NOFOLLOW met a link (EMLINK: BSD)
        return OutputError(
            f"{path} is a symbolic link; a run writes its own files only, never through a link: delete the link, or "
            f"choose another {option}."
        )
    if os.path.exists(folder) and not os.path.isdir(folder):
        return OutputError(f"cannot write to {folder}: it is a file, not a folder; choose another {option}.")
    return OutputError(f"cannot write to {folder}: {reason} (writing {what}); choose a writable {option}.")


def _temporary(path: Path) -> Path:
    """A new empty file next to ``path`` (created with O_EXCL: never an existing file or a link), named
    ``.NAME.RANDOM.partial.SUFFIX`` so that writers that pick the format by the suffix (matplotlib) still can."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial{path.suffix}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(path))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def write_file(
    path: str | Path, write: Callable[[Path], None], *, size: int | None = None, option: str = "--output-dir"
) -> Path:
    """Write ``path`` by ``write(temporary_path)`` (any writer that takes a file name: ``fig.savefig``,
    ``safetensors.torch.save_file``, ...), then flush it to disk and rename it over ``path``. The folder is created
    if missing. Returns ``path``.

    Args:
        path: the file to write.
        write: writes the whole file to the path it is given (a new empty file in the folder of ``path``).
        size: the size of what is written, when known (named when the device is full; otherwise the message gives
            what was written before the write failed).
        option: the command-line option that chooses the destination, named in an error.

    Raises:
        OutputError: the write failed for lack of space, a folder that cannot be written, or a link in the way (the
            temporary file is removed and ``path`` is left as it was).
    """
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(path)
        write(tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except Exception as err:
        written = _size(tmp)
        needed = _human(size) if size is not None else f"more than {_human(written)}" if written else None
        failure = output_error(path, err, needed=needed, option=option)
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if failure is None:
            raise
        raise failure from err
    return path


_PARTIAL_MARK = ".written-by-write_folder"  # in OUT.partial while write_folder fills it: the folder is its own


def write_folder(out: str | Path, write: Callable[[Path], None], *, option: str = "OUT") -> Path:
    """Create the folder ``out`` whole: ``write(partial)`` fills ``OUT.partial``, whose files are then flushed to disk
    and which is renamed to ``out``; returns ``out``. A reader never sees a half-written folder. When anything fails,
    what this call created (``OUT.partial``, and the folders above it it had to create) is removed. An ``OUT.partial``
    left by an interrupted call (it holds the mark this function puts there while it writes) is deleted first; any
    other ``OUT.partial`` is someone else's and is refused, never deleted.

    Args:
        out: the folder to create; it may exist as an empty folder.
        write: writes the folder's files into the folder it is given.
        option: the command-line argument that names ``out``, named in an error.

    Raises:
        FileExistsError: ``out`` exists and is not an empty folder (nothing is written).
        OutputError: a symbolic link at ``out`` or ``OUT.partial`` (refused: nothing is written or deleted where it
            points), an ``OUT.partial`` that this function did not leave, a folder that cannot be written, or a full
            device.
    """
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    check_new_folder(out, option=option)
    created = [folder for folder in (partial, *partial.parents) if not os.path.exists(folder)]
    mark = partial / _PARTIAL_MARK
    try:
        if partial.exists():
            shutil.rmtree(partial)  # the leftover of an interrupted write
        partial.mkdir(parents=True)
        created = created or [partial]
        mark.touch(exist_ok=False)
        write(partial)
        for path in partial.iterdir():
            if path != mark:
                _fsync_file(path)
        if out.exists():
            out.rmdir()
        mark.unlink()  # the folder is complete: renamed at once (no write, flush or kill point in between)
        partial.rename(out)
        _fsync_file(out)
        _fsync_file(out.parent)
    except Exception as err:
        for folder in created:
            if folder == partial:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty
        failure = output_error(out, err, what=f"the folder {out.name}", option=option)
        if failure is None:
            raise
        raise failure from err
    return out


def check_new_folder(out: str | Path, *, option: str = "OUT") -> None:
    """Refuse at once what :func:`write_folder` would refuse to create as ``out``: call it before a long computation
    whose results go there (an export's load of a run).

    Raises:
        FileExistsError: ``out`` exists and is not an empty folder.
        OutputError: a symbolic link at ``out`` or ``OUT.partial``, an ``OUT.partial`` an export did not leave, or a
            name the system cannot take (too long, a folder that cannot be read).
    """
    out = Path(out)
    try:
        _check_destination(out, out.with_name(out.name + ".partial"), option)
    except OSError as err:  # a name too long for the system, a folder that cannot be read, ...
        if isinstance(err, (OutputError, FileExistsError)):
            raise
        raise output_error(out, err, what=f"the folder {out.name}", option=option) from err


def _check_destination(out: Path, partial: Path, option: str) -> None:
    """Refuse, before anything is written, what :func:`write_folder` must not write through or over."""
    for path in (out, partial):
        if path.is_symlink():
            raise OutputError(
                f"{path} is a symbolic link; an export writes a folder of its own, never through a link: delete the "
                f"link, or choose another {option}."
            )
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder: write into a new one.")
    if partial.exists() and not (partial.is_dir() and (partial / _PARTIAL_MARK).is_file()):
        raise OutputError(
            f"{partial} exists and was not left by an interrupted export (an export writes there first): move it "
            f"away, or choose another {option}."
        )


def check_writable(folder: str | Path, *, option: str = "--output-dir") -> None:
    """Create ``folder`` if missing and a file in it, then delete the file: call it before a long computation whose
    results go there, so that a folder that cannot be written fails at once.

    Raises:
        OutputError: the folder cannot be created or written (``option`` is named in the message).
    """
    folder = Path(folder)
    probe = folder / ".write-check"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _temporary(probe).unlink()
    except OSError as err:
        raise output_error(probe, err, what="its outputs", option=option) from err


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_bytes(path: str | Path, data: bytes, *, option: str = "--output-dir") -> Path:
    """Write ``data`` to ``path`` aside and renamed (:func:`write_file`)."""

    def fill(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | _NOFOLLOW | _CLOEXEC | _BINARY)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    return write_file(path, fill, size=len(data), option=option)


def write_text(path: str | Path, text: str, *, option: str = "--output-dir") -> Path:
    """Write ``text`` (UTF-8) to ``path`` aside and renamed (:func:`write_file`)."""
    return write_bytes(path, text.encode("utf-8"), option=option)


def write_json(path: str | Path, data: Any, *, indent: int = 1, option: str = "--output-dir") -> Path:
    """Write ``data`` as JSON (with ``indent``, and a final newline) to ``path`` aside and renamed
    (:func:`write_file`)."""
    return write_text(path, json.dumps(data, indent=indent) + "\n", option=option)


def not_regular(path: str | Path, option: str = "--output-dir") -> OutputError:
    """The one-line error of a run's own file ``path`` that is not a regular file (a folder, a FIFO, a device, a
    socket), which a run neither reads, writes nor deletes."""
    return OutputError(
        f"{path} is not a regular file (a folder, a FIFO, a device, a socket): move it away, or choose another "
        f"{option}."
    )


def open_in_place(path: str | Path, flags: int, *, what: str | None = None, option: str = "--output-dir") -> int:
    """A descriptor of ``path``, a file of the run that is written in place (``.lock``, ``metrics.jsonl``), opened
    with ``flags`` (``os.O_CREAT`` to create it) and ``O_NOFOLLOW``, checked before anything is written: a symbolic
    link, a hard link (a file that also has another name, maybe outside the run folder) and anything but a regular
    file (a FIFO, which would block, or a device) are refused. The caller closes it.

    Raises:
        OutputError: one of those, or the file cannot be opened (a folder that cannot be written, ...); ``what``
            names the file in the message (default: its name).
    """
    path = Path(path)
    irregular = not_regular(path, option)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, 0o666)
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO opened for writing that nobody reads; a folder
            raise irregular from err
        raise output_error(path, err, what=what, option=option) from err
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return fd
    os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise irregular
    raise OutputError(
        f"{path} is a hard link (one file with {info.st_nlink} names, maybe outside the run folder), and a run writes "
        f"only files of its own: replace it with a copy of its own, or choose another {option}."
    )


def append_text(path: str | Path, text: str, *, option: str = "--output-dir") -> None:
    """Append ``text`` (UTF-8) to ``path``, created if missing, in one ``write`` call per chunk the system takes.

    Raises:
        OutputError: ``path`` is a symbolic link, a hard link or not a regular file (:func:`open_in_place`: nothing
            is written to it), its device is full, or its folder cannot be written.
    """
    path = Path(path)
    data = text.encode("utf-8")
    fd = open_in_place(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, option=option)
    try:
        _write_all(fd, data)
    except OSError as err:
        raise output_error(path, err, needed=_human(len(data)), option=option) from err
    finally:
        os.close(fd)


def read_bytes(path: str | Path, *, option: str = "--output-dir") -> bytes:
    """The bytes of a file of the run itself (e.g. ``metrics.jsonl`` before a resume rewrites it), opened with
    ``O_NOFOLLOW``.

    Raises:
        OutputError: ``path`` is a symbolic link, or not a regular file (:func:`not_regular`).
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK) and path.is_symlink():
            raise output_error(path, err, option=option) from err
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise not_regular(path, option)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()
