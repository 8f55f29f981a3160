"""Errors raised by the corpus loaders, with messages that say what to do."""

from __future__ import annotations

from deq_core.train.errors import UsageError


class CorpusError(UsageError, ValueError):
    """A corpus exists but cannot be used: empty split, text that is not UTF-8, unknown split or column, bad option."""


class CorpusNotFoundError(UsageError, FileNotFoundError):
    """No corpus where one was asked for (missing file, dataset not in the local Hugging Face cache in offline mode,
    dataset not found on the Hugging Face Hub)."""


class CorpusDownloadError(UsageError, ConnectionError):
    """A Hugging Face corpus could not be downloaded: the Hub did not answer (no network, proxy, timeout)."""


HOW_TO_GET_DATA = (
    "Either (1) on a machine with network, leave out --data-dir and --offline (and HF_HUB_OFFLINE / "
    "HF_DATASETS_OFFLINE): `datasets` downloads the corpus into the Hugging Face cache (~/.cache/huggingface, or "
    "$HF_HOME), which can be copied to a machine without network (same path, or HF_HOME pointing at the copy); or "
    "(2) put train.txt, valid.txt and test.txt (UTF-8, one sentence or paragraph per line, the classic PTB / "
    "WikiText format) in one directory and pass it with --data-dir DIR."
)
