"""Markdown tables of results: :func:`markdown_table` for installed tools (a model card, deq-toy's evaluation) and
:class:`MarkdownReport` for the benchmark scripts (printed as it grows, written to a file at the end)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from .files import write_text

__all__ = ["MarkdownReport", "markdown_table"]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table: one header row, then one line per row (cells as ``str(cell)``), ending in a
    newline.

    Raises:
        ValueError: a row whose number of cells differs from the header's.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells for {len(header)} columns: {list(row)!r}.")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


class MarkdownReport:
    """Markdown text printed as it is added (so a long benchmark shows progress) and written to a file at the end."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str = "") -> None:
        self.parts.append(text)
        print(text, flush=True)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.add(markdown_table(header, rows))

    def text(self) -> str:
        return "\n".join(self.parts) + "\n"

    def write(self, path: str | Path | None, first_line: str = "") -> None:
        """Write the report to ``path`` (nothing when None; aside and renamed, a failure is one line naming ``--out``:
        :func:`~deq_core.train.files.write_text`), after ``first_line`` (e.g. the command) if given."""
        if path:
            head = f"{first_line}\n\n" if first_line else ""
            write_text(Path(path), head + self.text(), option="--out")
