"""Measure the prose of the documentation site and fail where a page is too long or its sentences are.

    python docs/prose_check.py            # a table of every page; exit 1 if a page is above a target
    python docs/prose_check.py --quiet    # only the pages above a target

Pages: every ``docs/**/*.md`` except the generated API reference (``docs/reference/``). Targets, per page:
at most ``MAX_WORDS`` words of prose, a median sentence of at most ``MAX_MEDIAN`` words, no sentence over
``MAX_SENTENCE`` words.

What counts as prose, and how it is split into sentences (simple on purpose, so anyone can predict it):

- Left out: fenced code blocks (```` ``` ```` or ``~~~``), table rows (lines starting with ``|``), display math
  (``$$ ... $$`` and ``\\[ ... \\]``), inline math (``$...$``, ``\\(...\\)``), headings, mkdocstrings directives
  (``:::``), snippet includes (``--8<--``), HTML tags and admonition markers (``!!! note "Title"``).
- Kept, as one word each: an inline code span (```solve()```) and a link's text (``[text](url)`` counts as ``text``).
- A block is a paragraph (lines between blank lines) or one list item. A block ends a sentence.
- Inside a block a sentence ends at ``.``, ``!`` or ``?`` followed by a space and then a capital letter, a digit, a
  quote, a bracket or a code span. "e.g. the" therefore does not end a sentence, and neither does "1.5".
- A word is a whitespace-separated token with at least one letter or digit.

A page's word count is the sum of its sentences' words.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_WORDS = 3000
MAX_MEDIAN = 20
MAX_SENTENCE = 50

DOCS = Path(__file__).resolve().parent
_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SKIPPED_LINE = re.compile(r"^\s*(?:\||#{1,6}\s|:::|-{2}8<-{2}|!!!|\?{3}\+?)")
_INLINE_MATH = re.compile(r"\$[^$\n]+\$|\\\(.+?\\\)")
_CODE_SPAN = re.compile(r"`+[^`]*?`+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]")
_TAG = re.compile(r"<[^>]+>")
_ATTRS = re.compile(r"\{[:#.][^}]*\}")
_CODE = "\ue000code"  # what a code span becomes: one word, which may start a sentence
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[\ue000])")
_WORD = re.compile(r"[^\W_]", re.UNICODE)


@dataclass(frozen=True)
class PageStats:
    """The prose measures of one page: total words, the sentences' lengths in words."""

    name: str
    words: int
    lengths: tuple[int, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.lengths) if self.lengths else 0.0

    @property
    def over(self) -> int:
        """Sentences longer than ``MAX_SENTENCE`` words."""
        return sum(length > MAX_SENTENCE for length in self.lengths)

    def failures(self) -> list[str]:
        found = []
        if self.words > MAX_WORDS:
            found.append(f"{self.words} words (at most {MAX_WORDS})")
        if self.median > MAX_MEDIAN:
            found.append(f"median sentence {self.median:g} words (at most {MAX_MEDIAN})")
        if self.over:
            found.append(f"{self.over} sentences over {MAX_SENTENCE} words")
        return found


def prose_blocks(text: str) -> list[str]:
    """The prose blocks of a Markdown page (paragraphs and list items, one string each), with code, tables, math,
    headings and directives left out; inline code spans become one word, links their text."""
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None
    in_math = False

    def close() -> None:
        if current:
            blocks.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if in_math:
            if stripped.endswith(("$$", "\\]")):
                in_math = False
            continue
        match = _FENCE.match(line)
        if match:
            close()
            fence = match.group(1)
            continue
        if stripped.startswith(("$$", "\\[")):
            close()
            body = stripped[2:]
            in_math = not body.endswith(("$$", "\\]"))
            continue
        if not stripped or _SKIPPED_LINE.match(line):
            close()
            continue
        if _LIST_ITEM.match(line):
            close()
            stripped = _LIST_ITEM.sub("", line, count=1).strip()
        current.append(stripped)
    close()
    return blocks


def _clean(block: str) -> str:
    block = _INLINE_MATH.sub(" ", block)
    block = _CODE_SPAN.sub(_CODE, block)
    block = _LINK.sub(lambda m: m.group(1) or m.group(2) or "", block)
    block = _TAG.sub(" ", block)
    return _ATTRS.sub(" ", block)


def sentences(text: str) -> list[str]:
    """The sentences of a Markdown page's prose (see the module docstring for the rules)."""
    found = []
    for block in prose_blocks(text):
        for sentence in _SENTENCE_END.split(_clean(block)):
            if word_count(sentence):
                found.append(" ".join(sentence.replace(_CODE, "`code`").split()))
    return found


def word_count(sentence: str) -> int:
    return sum(bool(_WORD.search(token)) for token in sentence.split())


def measure(path: Path) -> PageStats:
    lengths = tuple(word_count(sentence) for sentence in sentences(path.read_text(encoding="utf-8")))
    return PageStats(name=str(path.relative_to(DOCS)), words=sum(lengths), lengths=lengths)


def pages(docs: Path = DOCS) -> list[Path]:
    """The hand-written pages: every Markdown file under ``docs`` except the generated API reference."""
    return sorted(p for p in docs.rglob("*.md") if "reference" not in p.relative_to(docs).parts[:1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", action="store_true", help="print only the pages above a target")
    parser.add_argument(
        "--longest", type=int, default=0, metavar="N", help="also print each page's N longest sentences"
    )
    args = parser.parse_args(argv)
    failed = 0
    header = f"{'page':32} {'words':>6} {'sentences':>9} {'median':>6} {'>50':>4}"
    if not args.quiet:
        print(header)
    for path in pages():
        stats = measure(path)
        problems = stats.failures()
        failed += bool(problems)
        if problems or not args.quiet:
            row = f"{stats.name:32} {stats.words:6d} {len(stats.lengths):9d} {stats.median:6g} {stats.over:4d}"
            print(row + ("  FAIL: " + "; ".join(problems) if problems else ""))
        if args.longest:
            text = path.read_text(encoding="utf-8")
            for sentence in sorted(sentences(text), key=word_count, reverse=True)[: args.longest]:
                print(f"    {word_count(sentence):3d}: {sentence}")
    if failed:
        print(
            f"{failed} pages above a target: at most {MAX_WORDS} words, median sentence <= {MAX_MEDIAN} words, "
            f"none over {MAX_SENTENCE} (python docs/prose_check.py --longest 5 shows the long sentences)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
