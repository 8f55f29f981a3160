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


DATA_DIR_FORMS = (
    "a folder with train.txt, valid.txt and test.txt (UTF-8, one sentence or paragraph per line, the classic PTB / "
    "WikiText format), or with the three splits in a form `datasets` reads (a `save_to_disk` folder; parquet, arrow, "
    "json, jsonl or txt files named by split)"
)
HOW_TO_GET_DATA = (
    "Either (1) on a machine with network, leave out --data-dir and --offline (and HF_HUB_OFFLINE / "
    "HF_DATASETS_OFFLINE): `datasets` downloads the corpus into the Hugging Face cache (~/.cache/huggingface, or "
    "$HF_HOME), which can be copied to a machine without network (same path, or HF_HOME pointing at the copy); or "
    "(2) put train.txt, valid.txt and test.txt (UTF-8, one sentence or paragraph per line, the classic PTB / "
    "WikiText format) in one directory and pass it with --data-dir DIR (or the three splits in a form `datasets` "
    "reads: a `save_to_disk` folder; parquet, arrow, json, jsonl or txt files named by split)."
)
MAX_CAUSE_CHARS = 300  # an error's own message is cut to this many characters in a one-line message


def describe_error(error: BaseException) -> str:
    """``error`` on one line for a message: its type and text (whitespace runs joined into one space, cut to
    MAX_CAUSE_CHARS), then, in parentheses, the same for the innermost error it was raised from when there is one
    (``datasets`` wraps a file's real problem in a DatasetGenerationError)."""

    def one(err: BaseException) -> str:
        text = " ".join(str(err).split())
        if len(text) > MAX_CAUSE_CHARS:
            text = text[: MAX_CAUSE_CHARS - 3] + "..."
        return f"{type(err).__name__}: {text}" if text else type(err).__name__

    inner, seen = error, {id(error)}
    while (inner.__cause__ or inner.__context__) is not None and id(inner.__cause__ or inner.__context__) not in seen:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
        seen.add(id(inner))
    return one(error) if inner is error else f"{one(error)} ({one(inner)})"
