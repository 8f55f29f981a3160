"""Datasets from the Hugging Face Hub (or its local cache): the corpora known by name (``HF_CORPORA``), offline mode,
and ``load_hub_dataset``, which calls ``datasets.load_dataset`` and turns its failures into one-line corpus errors.

A name that is a local folder ``load_dataset`` reads (data files, or a dataset repository's files with its README's
configs) goes the same way: ``datasets`` looks for a local folder before it asks the Hub.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DATA_DIR_FORMS, HOW_TO_GET_DATA, CorpusDownloadError, CorpusNotFoundError, describe_error

# Offline mode when either is set to one of these values (any case), as ``datasets`` and ``huggingface_hub`` read them.
OFFLINE_ENV_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
ENV_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})


@dataclass(frozen=True)
class HFCorpusSpec:
    """How to find a corpus on the Hugging Face Hub or in its cache: the dataset names to try, the config, the text
    column."""

    paths: tuple[str, ...]
    config: str | None
    text_column: str
    lower: bool


HF_CORPORA = {
    "ptb": HFCorpusSpec(("ptb_text_only", "ptb-text-only/ptb_text_only"), None, "sentence", lower=True),
    "wikitext-103": HFCorpusSpec(("wikitext", "Salesforce/wikitext"), "wikitext-103-v1", "text", lower=False),
    "wikitext-103-raw": HFCorpusSpec(("wikitext", "Salesforce/wikitext"), "wikitext-103-raw-v1", "text", lower=False),
}


@contextlib.contextmanager
def hf_offline() -> Iterator[None]:
    """Put ``datasets`` and ``huggingface_hub`` in offline mode for the duration of the block (restored after).

    Setting HF_HUB_OFFLINE in the environment has no effect once ``datasets`` is imported (it reads it at import), so
    the libraries' flags are set too. Offline, a dataset that is not cached fails at once instead of retrying ~25 s.
    """
    import datasets.config
    import huggingface_hub.constants

    saved = (
        os.environ.get("HF_HUB_OFFLINE"),
        datasets.config.HF_HUB_OFFLINE,
        datasets.config.HF_DATASETS_OFFLINE,
        huggingface_hub.constants.HF_HUB_OFFLINE,
    )
    os.environ["HF_HUB_OFFLINE"] = "1"
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved[0]
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE = saved[1], saved[2]
        huggingface_hub.constants.HF_HUB_OFFLINE = saved[3]


def offline_requested(offline: bool = False) -> bool:
    """Whether Hugging Face corpora come from the local cache only: ``offline`` (the ``--offline`` option) or
    HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set to 1, ON, YES or TRUE in the environment."""
    return offline or any(os.environ.get(var, "").upper() in ENV_TRUE_VALUES for var in OFFLINE_ENV_VARS)


def _network_failure(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, means that the Hub could not be reached: ConnectionError
    (``datasets`` raises it for a failed connection) or TimeoutError, or httpx's / requests' errors of that kind."""
    names = {"TransportError", "ConnectionError", "Timeout"}  # httpx's base class, requests' (not OSError's) ones
    while error is not None:
        if isinstance(error, (ConnectionError, TimeoutError)) or names & {c.__name__ for c in type(error).__mro__}:
            return True
        error = error.__cause__
    return False


def load_hub_dataset(
    name: str,
    paths: Sequence[str],
    config: str | None,
    cache_dir: Path | None = None,
    offline: bool = False,
    instead: str = f"pass --data-dir DIR: {DATA_DIR_FORMS}",
) -> Any:
    """The ``datasets.DatasetDict`` of the first of ``paths`` that ``datasets.load_dataset(path, config)`` loads:
    downloaded and cached the first time, read from the cache after; in offline mode (``offline``, or the environment:
    :func:`offline_requested`) from the local cache only, inside :func:`hf_offline`.

    Args:
        name: what the messages call the corpus (a key of ``HF_CORPORA``, or the dataset's name).
        paths: Hub dataset names (or local folders that ``load_dataset`` reads), tried in order.
        config: the dataset's config name (None: its default).
        cache_dir: the ``datasets`` cache directory (None: the default, ~/.cache/huggingface/datasets or $HF_HOME).
        offline: read the local cache only, never the network (the ``--offline`` option).
        instead: what else the user can do, for the end of the message when no path could be loaded online.

    Raises:
        CorpusNotFoundError: offline, the dataset is not in the cache (raised at once); online, no path could be
            loaded (each one's error is in the message). The message says how to get the corpus.
        CorpusDownloadError: online, the Hub could not be reached (after ``huggingface_hub``'s retries, ~25 s).
    """
    import datasets

    offline = offline_requested(offline)
    failures: list[str] = []
    hf_cache = None if cache_dir is None else str(cache_dir)
    with_config = f", config {config!r}" if config else ""
    with hf_offline() if offline else contextlib.nullcontext():
        for path in paths:
            try:
                return datasets.load_dataset(path, config, cache_dir=hf_cache)
            except Exception as error:
                if not offline and _network_failure(error):  # the other names would wait for the network again
                    raise CorpusDownloadError(
                        f"could not download corpus {name!r} (Hugging Face dataset {path!r}{with_config}): "
                        f"{describe_error(error)}; check the network connection (or proxy), or run with --offline to "
                        f"use a copy already in the local Hugging Face cache, or {instead}."
                    ) from error
                if not isinstance(error, (OSError, ValueError, datasets.exceptions.DatasetsError)):
                    raise
                failures.append(f"{path}: {describe_error(error)}")
    tried = f"tried {list(paths)}{with_config}; {'; '.join(failures)}"
    if offline:
        raise CorpusNotFoundError(
            f"corpus {name!r} is not in the local Hugging Face cache ({tried}), and offline mode (--offline, "
            f"HF_HUB_OFFLINE or HF_DATASETS_OFFLINE) downloads nothing. {HOW_TO_GET_DATA}"
        )
    raise CorpusNotFoundError(
        f"could not load corpus {name!r} from the Hugging Face Hub ({tried}). {instead[:1].upper()}{instead[1:]}."
    )
