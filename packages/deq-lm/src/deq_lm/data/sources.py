"""Where the text of a word-level corpus comes from: a local directory in the classic format (train.txt, valid.txt,
test.txt) or a Hugging Face dataset (downloaded and cached by ``datasets``; only from the local cache in offline mode).
A source yields the lines of each split and a fingerprint that changes when the text does (the key of the tokenized
cache)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import HOW_TO_GET_DATA, CorpusDownloadError, CorpusError, CorpusNotFoundError

SPLITS = ("train", "valid", "test")
HF_SPLIT_NAMES = {"train": ("train",), "valid": ("validation", "valid"), "test": ("test",)}
# Offline mode when either is set to one of these values (any case), as ``datasets`` and ``huggingface_hub`` read them.
OFFLINE_ENV_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
ENV_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})


class CorpusSource(Protocol):
    """The raw text of a corpus, split by split."""

    label: str  # short name used in cache file names
    lower: bool  # lowercase before tokenizing (PTB)

    def lines(self, split: str) -> Iterator[str]:
        """The lines of ``split`` ("train", "valid" or "test"), without their line breaks."""
        ...

    def fingerprint(self) -> str:
        """A hex digest that changes when the text of any split changes."""
        ...


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise CorpusError(f"unknown split {split!r}; choose one of {list(SPLITS)}.")


@dataclass(frozen=True)
class TextDirSource:
    """A directory holding train.txt, valid.txt and test.txt (UTF-8, one line of text per line)."""

    path: Path
    lower: bool = False

    def __post_init__(self) -> None:
        if not Path(self.path).is_dir():
            raise CorpusNotFoundError(f"corpus directory {self.path} does not exist. {HOW_TO_GET_DATA}")
        missing = [f"{s}.txt" for s in SPLITS if not self.file(s).is_file()]
        if missing:
            raise CorpusNotFoundError(
                f"corpus directory {self.path} lacks {', '.join(missing)}: it needs train.txt, valid.txt and "
                f"test.txt. {HOW_TO_GET_DATA}"
            )
        empty = [f"{s}.txt" for s in SPLITS if self.file(s).stat().st_size == 0]
        if empty:
            raise CorpusError(f"corpus file(s) {', '.join(empty)} in {self.path} are empty.")

    @property
    def label(self) -> str:
        return Path(self.path).resolve().name or "corpus"

    def file(self, split: str) -> Path:
        check_split(split)
        return Path(self.path) / f"{split}.txt"

    def lines(self, split: str) -> Iterator[str]:
        """Lines of ``split``.txt (split at b"\\n"; a UTF-8 byte-order mark is dropped).

        Raises:
            CorpusError: a line is not valid UTF-8 (the message gives the file and line number).
        """
        path = self.file(split)
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    bad = raw[error.start : error.start + 4]
                    raise CorpusError(
                        f"{path}, line {number}: not valid UTF-8 (bytes {bad!r} at column {error.start}); "
                        "corpus files must be UTF-8 text."
                    ) from error
                if number == 1:
                    text = text.removeprefix("\ufeff")
                yield text.rstrip("\r\n")

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for split in SPLITS:
            digest.update(split.encode())
            with self.file(split).open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()


@dataclass(frozen=True)
class HFSource:
    """The splits of a ``datasets.DatasetDict`` (train / validation / test) whose ``text_column`` holds one line per
    row, as ``ptb_text_only`` ("sentence") and ``wikitext`` ("text") do."""

    dataset: Any  # datasets.DatasetDict
    text_column: str
    label: str
    lower: bool = False

    def __post_init__(self) -> None:
        for split in SPLITS:
            columns = self.split_dataset(split).column_names
            if self.text_column not in columns:
                raise CorpusError(
                    f"dataset {self.label!r}, split {split!r} has no column {self.text_column!r} (columns: {columns})."
                )

    def split_dataset(self, split: str) -> Any:
        check_split(split)
        for name in HF_SPLIT_NAMES[split]:
            if name in self.dataset:
                return self.dataset[name]
        raise CorpusError(
            f"dataset {self.label!r} has no {split} split (looked for {list(HF_SPLIT_NAMES[split])}; it has "
            f"{list(self.dataset)})."
        )

    def lines(self, split: str) -> Iterator[str]:
        for batch in self.split_dataset(split).iter(batch_size=10_000):
            for text in batch[self.text_column]:
                yield (text or "").rstrip("\r\n")

    def fingerprint(self) -> str:
        """From the dataset's cache files (name, size, modification time); from the text when it is in memory."""
        digest = hashlib.sha256(f"{self.label}/{self.text_column}".encode())
        for split in SPLITS:
            digest.update(split.encode())
            files = [entry["filename"] for entry in self.split_dataset(split).cache_files]
            if files:
                for name in files:
                    stat = os.stat(name)
                    digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
            else:
                for line in self.lines(split):
                    digest.update(line.encode() + b"\n")
        return digest.hexdigest()


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


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"


def load_hf_source(name: str, cache_dir: Path | None = None, offline: bool = False) -> HFSource:
    """The corpus ``name`` ("ptb", "wikitext-103", "wikitext-103-raw") with ``datasets.load_dataset``: downloaded and
    cached the first time, read from the cache after; in offline mode (``offline``, or HF_HUB_OFFLINE /
    HF_DATASETS_OFFLINE set in the environment: :func:`offline_requested`) from the local cache only, inside
    :func:`hf_offline`.

    Args:
        name: a key of ``HF_CORPORA``.
        cache_dir: the ``datasets`` cache directory (None: the default, ~/.cache/huggingface/datasets or $HF_HOME).
        offline: read the local cache only, never the network (the ``--offline`` option).

    Raises:
        CorpusNotFoundError: offline, the dataset is not in the cache (raised at once); online, no name of the dataset
            could be loaded. The message says how to get the corpus.
        CorpusDownloadError: online, the Hub could not be reached (after ``huggingface_hub``'s retries, ~25 s).
    """
    if name not in HF_CORPORA:
        raise CorpusError(f"unknown corpus {name!r}; choose one of {list(HF_CORPORA)} or pass a directory.")
    spec = HF_CORPORA[name]
    import datasets

    offline = offline_requested(offline)
    failures: list[str] = []
    hf_cache = None if cache_dir is None else str(cache_dir)
    config = f", config {spec.config!r}" if spec.config else ""
    with hf_offline() if offline else contextlib.nullcontext():
        for path in spec.paths:
            try:
                dataset = datasets.load_dataset(path, spec.config, cache_dir=hf_cache)
            except Exception as error:
                if not offline and _network_failure(error):  # the other names would wait for the network again
                    raise CorpusDownloadError(
                        f"could not download corpus {name!r} (Hugging Face dataset {path!r}{config}): "
                        f"{_first_line(error)}; check the network connection (or proxy), or run with --offline to use "
                        "a copy already in the local Hugging Face cache, or pass --data-dir DIR with train.txt, "
                        "valid.txt and test.txt."
                    ) from error
                if not isinstance(error, (OSError, ValueError)):
                    raise
                failures.append(f"{path}: {_first_line(error)}")
                continue
            return HFSource(dataset, spec.text_column, label=name, lower=spec.lower)
    tried = f"tried {list(spec.paths)}{config}; {'; '.join(failures)}"
    if offline:
        raise CorpusNotFoundError(
            f"corpus {name!r} is not in the local Hugging Face cache ({tried}), and offline mode (--offline, "
            f"HF_HUB_OFFLINE or HF_DATASETS_OFFLINE) downloads nothing. {HOW_TO_GET_DATA}"
        )
    raise CorpusNotFoundError(
        f"could not load corpus {name!r} from the Hugging Face Hub ({tried}). Pass --data-dir DIR with train.txt, "
        "valid.txt and test.txt (UTF-8, one sentence or paragraph per line, the classic PTB / WikiText format) instead."
    )


def corpus_source(
    name: str, data_dir: Path | None = None, hf_cache_dir: Path | None = None, offline: bool = False
) -> CorpusSource:
    """The source of corpus ``name``: the directory ``data_dir`` when given (PTB lowercased when ``name`` is "ptb"),
    else the Hugging Face dataset (:func:`load_hf_source`; ``offline``: from the local cache only)."""
    if data_dir is not None:
        lower = HF_CORPORA[name].lower if name in HF_CORPORA else False
        return TextDirSource(Path(data_dir), lower=lower)
    return load_hf_source(name, hf_cache_dir, offline=offline)
