"""Download a Hugging Face corpus into the local Hugging Face cache once: ``python -m deq_lm.data.download NAME``.

Prints one line: the rows of each split and the text column, or what went wrong and how to fix it (exit status 2,
no traceback), e.g. without a network. Training reads the cached copy afterwards, also with ``--offline``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deq_core.train.cli import usage_error
from deq_core.train.errors import UsageError

from .hub import HF_CORPORA
from .sources import SPLITS, load_hf_source


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for an error, printed on one line)."""
    parser = argparse.ArgumentParser(prog="python -m deq_lm.data.download", description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=list(HF_CORPORA), help="the corpus")
    parser.add_argument("--cache-dir", type=Path, default=None, help="the datasets cache (default: the Hugging Face "
                        "cache, ~/.cache/huggingface or $HF_HOME)")  # fmt: skip
    parser.add_argument("--offline", action="store_true", help="only check the local cache (as HF_HUB_OFFLINE=1)")
    args = parser.parse_args(argv)
    try:
        source = load_hf_source(args.name, cache_dir=args.cache_dir, offline=args.offline)
    except UsageError as err:
        return usage_error(parser.prog, err)
    rows = ", ".join(f"{split} {source.split_dataset(split).num_rows:,}" for split in SPLITS)
    print(f"{args.name}: {rows} rows of column {source.text_column!r}, in the Hugging Face cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
