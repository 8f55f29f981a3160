"""The ``metrics.jsonl`` file of a run: :class:`MetricsLog` (one JSON object per line, appended and flushed line by
line), :func:`read_metrics` and :func:`select` (the series of one key, for plots)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["MetricsLog", "read_metrics", "select"]


class MetricsLog:
    """Append-only JSON-lines metrics file; each :meth:`write` is one line, flushed at once (safe to read while the
    run goes on, and nothing is lost when it crashes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; tensors and numpy scalars are converted to Python numbers, NaN/Inf to strings."""
        line = json.dumps({k: _plain(v) for k, v in record.items()})
        with self.path.open("a") as fh:
            fh.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        """All records written so far (an empty list when the file does not exist)."""
        return read_metrics(self.path)

    def line_count(self) -> int:
        """The number of complete lines written so far (saved with a checkpoint, for :meth:`resume_at`)."""
        return self.path.read_bytes().count(b"\n") if self.path.exists() else 0

    def resume_at(self, lines: int) -> bool:
        """Keep the first ``lines`` complete lines (those written before the checkpoint a run resumes from), so that
        a resumed run logs no line twice. Returns True when a last line cut short by a crash (the file did not end
        with a newline) was dropped."""
        text = self.path.read_text() if self.path.exists() else ""
        complete = text.split("\n")  # the last item is "" or a line cut short
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text("".join(line + "\n" for line in complete[:-1][:lines]))
        partial.replace(self.path)
        return complete[-1] != ""


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl file; raises ValueError naming the line when one is not valid JSON."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg}).") from err
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
