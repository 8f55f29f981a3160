"""A >= 1M-token English corpus available offline from a Debian package: the reStructuredText sources of the full
Python documentation (library reference, language reference, tutorial, HOWTOs, FAQ, What's New, C API).

Install it once (no network at run or test time afterwards)::

    apt-get install python3.11-doc          # puts the sources in /usr/share/doc/python3.11/html/_sources/
    python -m deq_lm.data.pythondocs_corpus DIR [--source /usr/share/doc/python3.11/html/_sources]

``write_pythondocs_corpus(DIR, SOURCE)`` writes ``train.txt``, ``valid.txt`` and ``test.txt`` in the classic format:
one paragraph per line, WikiText-style tokens (words and punctuation marks separated by spaces, as the pydoc corpus,
``pydoc_corpus.tokenize_line``). Markup is reduced to its prose: reST roles (``:func:`len```) keep their text,
links (```title <url>`_``) keep their title, inline literals keep their content; directive lines (``.. note::``),
literal blocks (the indented block after a paragraph ending in ``::``), interactive sessions (``>>>``), comments and
lines without a letter or digit (heading underlines, table borders) are dropped.

The split is by document, never by line: the ``*.rst.txt`` files sorted by their path relative to SOURCE, file i
goes to valid when i % 10 == 0, to test when i % 10 == 5, to train otherwise. Deterministic for a given package
version (python3.11-doc 3.11.2-6+deb12u9: 497 files, about 1.63M / 0.21M / 0.15M tokens, see docs/deq-lm-claims.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from deq_core.train.cli import usage_error

from .errors import CorpusNotFoundError
from .pydoc_corpus import TEST_SLOT, VALID_SLOT, tokenize_line, write_splits
from .sources import SPLITS

DEFAULT_SOURCE = Path("/usr/share/doc/python3.11/html/_sources")
INSTALL_HINT = "install it with `apt-get install python3.11-doc` or pass --source DIR (a folder of *.rst.txt files)"

_ROLE = re.compile(r":[\w:+.-]+:`([^`]*)`")  # :func:`len` -> len ; :ref:`title <target>` -> title <target>
_LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")  # `title <https://...>`_ -> title
_TARGET = re.compile(r"\s*<[^<>\s]*>$")  # the "<target>" left by a role
_FIELD_OR_SESSION = re.compile(r"\s*(>>>|\.\.\.\s|\.\.\.$|:[\w .-]+:(\s|$))")  # ">>> x", "... y", ":param x: z"


def _role_text(match: re.Match[str]) -> str:
    text = match.group(1).lstrip("~!")
    return _TARGET.sub("", text) if "<" in text else text


def strip_inline(line: str) -> str:
    """Prose of one reST line: roles, links, literals and emphasis reduced to their text."""
    line = _ROLE.sub(_role_text, line)
    line = _LINK.sub(lambda m: m.group(1), line)
    line = line.replace("``", "").replace("**", "")
    line = re.sub(r"\*([^*\s][^*]*)\*", r"\1", line)  # *emphasis*
    line = re.sub(r"::$", ":", line)  # "for example::" opens a literal block; the prose reads "for example:"
    return re.sub(r"`([^`]*)`_{0,2}", r"\1", line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def blocks(text: str) -> Iterator[list[str]]:
    """The blank-line separated blocks of ``text`` (lists of lines, tabs expanded)."""
    block: list[str] = []
    for line in text.expandtabs(8).splitlines():
        if line.strip():
            block.append(line.rstrip())
        elif block:
            yield block
            block = []
    if block:
        yield block


def prose_paragraphs(text: str) -> list[str]:
    """The tokenized prose paragraphs of one reST document (see the module docstring for what is dropped)."""
    result: list[str] = []
    literal_indent: int | None = None  # inside a literal block: the indent of the paragraph that opened it
    for block in blocks(text):
        indent = _indent(block[0])
        if literal_indent is not None and indent > literal_indent:
            continue
        literal_indent = None
        first = block[0].lstrip()
        if first.startswith(".."):  # directive, comment or link target: its first line goes, the rest stays
            literal_indent = indent if _is_code_directive(first) else None
            block = block[1:]
            if literal_indent is not None or not block:
                continue
        kept = [line.strip() for line in block if not _FIELD_OR_SESSION.match(line)]
        kept = [line for line in kept if re.search(r"[^\W_]", line)]
        if block[-1].rstrip().endswith("::"):
            literal_indent = indent
        line = tokenize_line(" ".join(" ".join(strip_inline(k) for k in kept).split()))
        if re.search(r"[^\W\d_]", line):
            result.append(line)
    return result


def _is_code_directive(line: str) -> bool:
    """Directives whose body is code or data, not prose."""
    return bool(re.match(r"\.\.\s+(code-block|sourcecode|code|literalinclude|testcode|testoutput|doctest|"
                         r"productionlist|highlight|csv-table|raw|only|testsetup|testcleanup)\b", line))  # fmt: skip


def document_paths(source: Path) -> list[Path]:
    """The ``*.rst.txt`` files under ``source``, sorted by their relative path; CorpusNotFoundError if none."""
    if not source.is_dir():
        raise CorpusNotFoundError(f"no Python documentation sources at {source}: {INSTALL_HINT}.")
    paths = sorted(source.rglob("*.rst.txt"), key=lambda p: p.relative_to(source).as_posix())
    if not paths:
        raise CorpusNotFoundError(f"no *.rst.txt files under {source}: {INSTALL_HINT}.")
    return paths


def pythondocs_splits(source: Path = DEFAULT_SOURCE) -> dict[str, list[str]]:
    """{"train", "valid", "test"} -> tokenized paragraph lines, split by document (file i: valid when i % 10 == 0,
    test when i % 10 == 5, train otherwise)."""
    splits: dict[str, list[str]] = {split: [] for split in SPLITS}
    for index, path in enumerate(document_paths(Path(source))):
        slot = index % 10
        split = "valid" if slot == VALID_SLOT else "test" if slot == TEST_SLOT else "train"
        splits[split].extend(prose_paragraphs(path.read_text(encoding="utf-8", errors="replace")))
    return splits


def write_pythondocs_corpus(out_dir: Path, source: Path = DEFAULT_SOURCE) -> Path:
    """Write train.txt, valid.txt and test.txt of the corpus to ``out_dir`` (:func:`write_splits`); return it."""
    return write_splits(out_dir, pythondocs_splits(source))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deq_lm.data.pythondocs_corpus", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out_dir", type=Path, help="directory to write train.txt, valid.txt, test.txt to")
    parser.add_argument(
        "--source", type=Path, default=DEFAULT_SOURCE, help=f"*.rst.txt folder (default {DEFAULT_SOURCE})"
    )
    args = parser.parse_args(argv)
    try:
        write_pythondocs_corpus(args.out_dir, args.source)
    except CorpusNotFoundError as err:
        return usage_error(parser.prog, err)
    for split in SPLITS:
        text = (args.out_dir / f"{split}.txt").read_text(encoding="utf-8")
        print(f"{split}: {len(text.splitlines())} lines, {len(text.split())} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
