"""The ``metrics.jsonl`` file of a run: :class:`MetricsLog` (one JSON object per line, appended and flushed line by
line; never written through a symbolic link), :func:`read_metrics` and :func:`select` (the series of one key, for
plots); :class:`MetricsError` for a file that is not one (one line naming the file and line)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import UsageError
from .files import append_text, not_regular, read_bytes, write_bytes

__all__ = ["MetricsError", "MetricsLog", "read_metrics", "select"]


class MetricsError(UsageError, ValueError):
    """A metrics file that cannot be read: not UTF-8 text, or a line that is not a JSON object (one line naming the
    file and the line)."""


class MetricsLog:
    """Append-only JSON-lines metrics file; each :meth:`write` is one line, flushed at once (safe to read while the
    run goes on, and nothing is lost when it crashes). The file is the run's own: a symbolic link in its place is
    refused (:class:`~deq_core.train.files.OutputError`), never written through."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; tensors and numpy scalars are converted to Python numbers, NaN/Inf to strings."""
        line = json.dumps({k: _plain(v) for k, v in record.items()})
        append_text(self.path, line + "\n")

    def start(self) -> None:
        """Start the log of a new run: delete the file a run that stopped before its first checkpoint left (a link
        there is deleted, never what it points to).

        Raises:
            OutputError: something else than a file is there (a folder, a FIFO): nothing is deleted.
        """
        if self.path.is_symlink() or self.path.is_file():
            self.path.unlink()
        elif self.path.exists():
            raise not_regular(self.path)

    def read(self) -> list[dict[str, Any]]:
        """All records written so far (an empty list when the file does not exist)."""
        return read_metrics(self.path)

    def line_count(self) -> int:
        """The number of complete lines written so far."""
        return self._bytes().count(b"\n")

    def mark(self) -> tuple[int, str]:
        """(the number of complete lines written so far, the SHA-256 hex digest of those lines): saved with a
        checkpoint, for :meth:`resume_at`."""
        data = self._bytes()
        complete = data[: data.rfind(b"\n") + 1]
        return complete.count(b"\n"), hashlib.sha256(complete).hexdigest()

    def resume_at(self, lines: int, digest: str = "") -> bool:
        """Keep the first ``lines`` complete lines (those written before the checkpoint a run resumes from), so that
        a resumed run logs no line twice; ``digest``: their SHA-256 digest as :meth:`mark` gave it ("": not checked).
        Returns True when a last line cut short by a crash (the file did not end with a newline) was dropped.

        Raises:
            MetricsError: a line kept is not UTF-8 text or not a JSON object (the file is not this run's log), the
                file has fewer than ``lines`` complete lines (deleted, emptied or cut: the run's history is missing),
                or they are not the lines the checkpoint was saved with (edited, reordered, replaced, or another
                count in train_state.json).
            OutputError: the file is a symbolic link, or cannot be rewritten.
        """
        complete = self._bytes().split(b"\n")  # the last item is b"" or a line cut short
        kept = b"".join(line + b"\n" for line in complete[:-1][:lines])
        _records(kept, self.path)
        fix = "restore the file, or train a new run in another --output-dir"
        if len(complete) - 1 < lines:
            found = f"has {len(complete) - 1} complete line(s)" if self.path.exists() else "does not exist"
            raise MetricsError(
                f"{self.path} {found}, but the checkpoint to resume from counted {lines} lines in it: the run's "
                f"history is missing; {fix}."
            )
        if digest and hashlib.sha256(kept).hexdigest() != digest:
            raise MetricsError(
                f"the first {lines} lines of {self.path} are not those the checkpoint to resume from was saved with "
                f"(lines edited, reordered or replaced, or train_state.json changed): the run's history differs; {fix}."
            )
        write_bytes(self.path, kept)
        return complete[-1] != b""

    def _bytes(self) -> bytes:
        try:
            return read_bytes(self.path)
        except FileNotFoundError:
            return b""


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl file (an empty list when it does not exist).

    Raises:
        MetricsError: (a ValueError) naming the line that is not UTF-8 text or not a JSON object, or a ``path`` that
            is not a file.
    """
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        raise MetricsError(f"{path} is not a file (a folder?): move it away, or read the metrics file of a run.")
    return _records(path.read_bytes(), path)


def _records(data: bytes, path: Path) -> list[dict[str, Any]]:
    fix = "not a metrics file of this project, or a damaged one: restore it, or train a new run in another --output-dir"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        number = data.count(b"\n", 0, err.start) + 1
        raise MetricsError(f"{path}:{number} is not UTF-8 text (byte {err.start}); {fix}.") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise MetricsError(f"{path}:{number} is not valid JSON ({err.msg}); {fix}.") from None
        except RecursionError:
            raise MetricsError(f"{path}:{number} is JSON nested too deeply to be a record; {fix}.") from None
        if not isinstance(record, dict):
            raise MetricsError(f"{path}:{number} is not a JSON object; {fix}.")
        records.append(record)
    return records


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item) and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def select(records: Iterable[dict[str, Any]], split: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` in the records of ``split`` that have it (for plots)."""
    steps, values = [], []
    for r in records:
        if r.get("split") == split and key in r and isinstance(r[key], (int, float)):
            steps.append(int(r["step"]))
            values.append(float(r[key]))
    return steps, values
