"""Helpers shared by the deq-lm benchmarks (``memory.py``, ``speed.py``): Markdown output, units, timing.

Not a benchmark itself: ``nox -s bench`` runs ``benchmarks/[!_]*.py``, so this module (leading underscore) is only
imported. The scripts put their own folder first on ``sys.path`` when run as ``python benchmarks/<name>.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

MIB = 2.0**20
GIB = 2.0**30


def note(text: str) -> None:
    """A progress message on stderr (stdout stays pure Markdown)."""
    print(text, file=sys.stderr, flush=True)


def mib(n_bytes: float) -> str:
    """``n_bytes`` in MiB with one decimal."""
    return f"{n_bytes / MIB:,.1f}"


def gib(n_bytes: float) -> str:
    """``n_bytes`` in GiB with two decimals."""
    return f"{n_bytes / GIB:.2f}"


def percent(fraction: float) -> str:
    """A fraction as a percentage with one decimal, e.g. 0.8123 -> '81.2%'."""
    return f"{100 * fraction:.1f}%"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table (one header row, one line per row)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Report:
    """Markdown text printed as it is added, and written to a file at the end when asked."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str = "") -> None:
        self.parts.append(text)
        print(text, flush=True)

    def table(self, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        self.add(markdown_table(header, rows))

    def text(self) -> str:
        return "\n".join(self.parts) + "\n"

    def write(self, path: str | Path | None, first_line: str = "") -> None:
        """Write the report to ``path`` (nothing when None), after ``first_line`` (e.g. the command) if given."""
        if path:
            head = f"{first_line}\n\n" if first_line else ""
            Path(path).write_text(head + self.text(), encoding="utf-8")


def command_line(script: str, argv: Sequence[str]) -> str:
    """The command that reproduces this run (from the repository root), as a Markdown code line."""
    words = ["OMP_NUM_THREADS=1", "python", f"packages/deq-lm/benchmarks/{script}", *argv]
    return "Command: `" + " ".join(words) + "`"


def seconds(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
