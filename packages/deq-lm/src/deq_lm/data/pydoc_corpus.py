"""A small English corpus available offline everywhere: the text of Python's own documentation topics, which ships
with CPython as ``pydoc_data.topics`` (79 topics, about 65K words; the exact text depends on the Python version).

``write_pydoc_corpus(DIR)`` writes it in the classic format (train.txt, valid.txt, test.txt) with WikiText-style
tokens (words and punctuation marks separated by spaces, one paragraph per line; a run of one punctuation mark such
as "..." is one token). Lines without a letter or digit (heading underlines, table borders) are dropped: their long
runs of repeated marks would otherwise be most of some topics and trivially predictable. Topics are assigned to
splits by their position in sorted order (every 10th from the first to valid, every 10th from the sixth to test),
so no topic is in two splits (about 81K / 7.4K / 7.7K tokens with Python 3.11).

    python -m deq_lm.data.pydoc_corpus DIR      # or: corpus=pydoc without a data_dir (written to the cache)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from deq_core.train.cli import usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import write_text

from .sources import SPLITS

TOKEN = re.compile(r"\w+|([^\w\s])\1*")
VALID_SLOT, TEST_SLOT = 0, 5  # topic i goes to valid when i % 10 == 0, to test when i % 10 == 5


def tokenize_line(line: str) -> str:
    """Words and punctuation marks of ``line`` separated by single spaces ("f(x)..." -> "f ( x ) ...")."""
    return " ".join(match.group(0) for match in TOKEN.finditer(line))


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a topic (blocks separated by blank lines) without their lines that hold no letter or digit,
    each joined into one tokenized line; empty paragraphs are dropped."""
    result = []
    for block in re.split(r"\n\s*\n", text):
        kept = [line for line in block.splitlines() if re.search(r"\w", line)]
        line = tokenize_line(" ".join(" ".join(kept).split()))
        if line:
            result.append(line)
    return result


def pydoc_splits() -> dict[str, list[str]]:
    """{"train", "valid", "test"} -> tokenized paragraph lines, from this Python's ``pydoc_data.topics``."""
    from pydoc_data.topics import topics

    splits: dict[str, list[str]] = {split: [] for split in SPLITS}
    for index, name in enumerate(sorted(topics)):
        slot = index % 10
        split = "valid" if slot == VALID_SLOT else "test" if slot == TEST_SLOT else "train"
        splits[split].extend(paragraphs(topics[name]))
    return splits


def write_splits(out_dir: Path, splits: dict[str, list[str]]) -> Path:
    """Write each split's lines to ``out_dir/SPLIT.txt`` (created); return ``out_dir``.

    A file that already holds the same text is left alone; others are written to a temporary file of this process
    and moved into place, so processes that start at the same time (``accelerate launch``) never see a partial file.
    """
    out_dir = Path(out_dir)
    for split, lines in splits.items():
        target = out_dir / f"{split}.txt"
        text = "\n".join(lines) + "\n"
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        write_text(target, text, option="OUT_DIR")
    return out_dir


def write_pydoc_corpus(out_dir: Path) -> Path:
    """Write train.txt, valid.txt and test.txt of the pydoc corpus to ``out_dir`` (:func:`write_splits`)."""
    return write_splits(out_dir, pydoc_splits())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deq_lm.data.pydoc_corpus", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write train.txt, valid.txt, test.txt to")
    args = parser.parse_args(argv)
    try:
        write_pydoc_corpus(args.out_dir)
    except UsageError as err:
        return usage_error(parser.prog, err)
    for split in SPLITS:
        text = (args.out_dir / f"{split}.txt").read_text(encoding="utf-8")
        print(f"{split}: {len(text.splitlines())} lines, {len(text.split())} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
