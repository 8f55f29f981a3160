"""Errors raised by the corpus loaders, with messages that say what to do."""

from __future__ import annotations

from deq_core.train.errors import UsageError


class CorpusError(UsageError, ValueError):
    """A corpus exists but cannot be used: empty split, text that is not UTF-8, unknown split or column, bad option."""


class CorpusNotFoundError(UsageError, FileNotFoundError):
    """No corpus where one was asked for (missing file, dataset not in the local Hugging Face cache)."""


HOW_TO_GET_DATA = (
    "Nothing can be downloaded on this machine. Either (1) on a machine with network run "
    "`python -c \"import datasets; datasets.load_dataset('ptb_text_only')\"` (or "
    "`datasets.load_dataset('wikitext', 'wikitext-103-v1')`) and copy its Hugging Face cache "
    "(~/.cache/huggingface, or $HF_HOME) to this machine, keeping the same path or pointing HF_HOME at the copy; "
    "or (2) put train.txt, valid.txt and test.txt (UTF-8, one sentence or paragraph per line, the classic "
    "PTB / WikiText format) in one directory and pass it with --data-dir DIR."
)
