"""Where the text of a word-level corpus comes from: a local directory in the classic format (train.txt, valid.txt,
test.txt), a local folder in another form ``datasets`` reads (``local_datasets``), or a Hugging Face dataset
(``hub``: downloaded and cached by ``datasets``; only from the local cache in offline mode). A source yields the lines
of each split and a fingerprint that changes when the text does (the key of the tokenized cache)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import DATA_DIR_FORMS, HOW_TO_GET_DATA, CorpusError, CorpusNotFoundError
from .hub import HF_CORPORA, load_hub_dataset
from .local_datasets import is_text_folder, read_dataset_folder

SPLITS = ("train", "valid", "test")
HF_SPLIT_NAMES = {"train": ("train",), "valid": ("validation", "valid"), "test": ("test",)}
TEXT_COLUMN = "text"  # the column read when data.text_column is empty and the dataset has it
STRING_DTYPES = ("string", "large_string")


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
                f"test.txt, or the three splits in a form `datasets` reads. {HOW_TO_GET_DATA}"
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
    """The splits of a ``datasets.DatasetDict`` whose ``text_column`` holds one line of text per row, as
    ``ptb_text_only`` ("sentence") and ``wikitext`` ("text") do.

    splits: the names of the train, valid and test splits in the dataset (empty: "train", "validation" or "valid",
    "test"). origin: where the dataset was read from, for messages (empty: the label, from the Hugging Face cache).
    Every split must exist, hold rows and have ``text_column`` as a column of strings.
    """

    dataset: Any  # datasets.DatasetDict
    text_column: str
    label: str
    lower: bool = False
    splits: tuple[str, ...] = ()
    origin: str = ""

    def __post_init__(self) -> None:
        if self.splits and len(self.splits) != len(SPLITS):
            raise CorpusError(f"splits must name the train, valid and test splits (three names), got {self.splits}.")
        for split in SPLITS:
            part = self.split_dataset(split)
            columns = part.column_names
            if self.text_column not in columns:
                raise CorpusError(
                    f"dataset {self.label!r}, split {split!r} has no column {self.text_column!r} (columns: {columns}); "
                    "set data.text_column to the column that holds the text."
                )
            dtype = getattr(part.features[self.text_column], "dtype", type(part.features[self.text_column]).__name__)
            if dtype not in STRING_DTYPES:
                raise CorpusError(
                    f"dataset {self.label!r}, split {split!r}: column {self.text_column!r} holds {dtype} values, not "
                    f"text; set data.text_column to a column of strings (string columns: {string_columns(part)})."
                )
            if part.num_rows == 0:
                raise CorpusError(f"dataset {self.label!r}, split {split!r} ({self.split_name(split)!r}) has no rows.")

    def split_name(self, split: str) -> str:
        """The name in the dataset of ``split`` ("train", "valid" or "test")."""
        return find_split(self.dataset, split, self.splits, self.label)

    def split_dataset(self, split: str) -> Any:
        return self.dataset[self.split_name(split)]

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

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        label: str,
        text_column: str = "",
        lower: bool = False,
        splits: Sequence[str] = (),
        origin: str = "",
    ) -> HFSource:
        """The source of ``dataset`` (a ``datasets.DatasetDict``); ``text_column`` empty: the column "text" when the
        training split has one, else its only column of strings.

        Raises:
            CorpusError: a split is missing, empty, or lacks the text column or has one that is not of strings; the
                text column is empty and the training split has no column "text" and not exactly one of strings.
        """
        if not text_column:
            train = dataset[find_split(dataset, "train", tuple(splits), label)]
            found = string_columns(train)
            if TEXT_COLUMN in train.column_names:
                text_column = TEXT_COLUMN
            elif len(found) == 1:
                text_column = found[0]
            else:
                raise CorpusError(
                    f"dataset {label!r} has no text column: its train split has no column {TEXT_COLUMN!r} and "
                    f"{len(found)} columns of strings {found} (columns: {train.column_names}); set "
                    "data.text_column=NAME."
                )
        return cls(dataset, text_column, label, lower, tuple(splits), origin)


def find_split(dataset: Any, split: str, splits: tuple[str, ...], label: str) -> str:
    """The name in ``dataset`` (a ``datasets.DatasetDict``) of ``split`` ("train", "valid" or "test"): the matching
    one of ``splits`` (the names of the train, valid and test splits), or when empty the first present of
    ``HF_SPLIT_NAMES[split]``.

    Raises:
        CorpusError: the dataset has no such split (the message lists the names it has).
    """
    check_split(split)
    names = (splits[SPLITS.index(split)],) if splits else HF_SPLIT_NAMES[split]
    for name in names:
        if name in dataset:
            return name
    how = "set data.splits=TRAIN,VALID,TEST to its names" if not splits else "fix data.splits"
    raise CorpusError(
        f"dataset {label!r} has no {split} split (looked for {list(names)}; it has {list(dataset)}): {how}."
    )


def string_columns(part: Any) -> list[str]:
    """The columns of ``part`` (a ``datasets.Dataset``) that hold strings."""
    return [name for name, feature in part.features.items() if getattr(feature, "dtype", None) in STRING_DTYPES]


def load_hf_source(
    name: str, cache_dir: Path | None = None, offline: bool = False, text_column: str = "", splits: Sequence[str] = ()
) -> HFSource:
    """The corpus ``name`` ("ptb", "wikitext-103", "wikitext-103-raw") with ``datasets.load_dataset``: downloaded and
    cached the first time, read from the cache after; in offline mode (``offline``, or HF_HUB_OFFLINE /
    HF_DATASETS_OFFLINE set in the environment) from the local cache only (:func:`~deq_lm.data.hub.load_hub_dataset`).

    Args:
        name: a key of ``HF_CORPORA``.
        cache_dir: the ``datasets`` cache directory (None: the default, ~/.cache/huggingface/datasets or $HF_HOME).
        offline: read the local cache only, never the network (the ``--offline`` option).
        text_column: the column of text (empty: the corpus' own, ``HF_CORPORA[name].text_column``).
        splits: the names of the train, valid and test splits (empty: train, validation, test).

    Raises:
        CorpusNotFoundError: offline, the dataset is not in the cache (raised at once); online, no name of the dataset
            could be loaded. The message says how to get the corpus.
        CorpusDownloadError: online, the Hub could not be reached (after ``huggingface_hub``'s retries, ~25 s).
        CorpusError: an unknown name; a split or the text column is missing, empty or not text.
    """
    if name not in HF_CORPORA:
        raise CorpusError(f"unknown corpus {name!r}; choose one of {list(HF_CORPORA)} or pass a directory.")
    spec = HF_CORPORA[name]
    dataset = load_hub_dataset(name, spec.paths, spec.config, cache_dir, offline)
    return HFSource.from_dataset(dataset, name, text_column or spec.text_column, spec.lower, splits)


def hub_label(dataset: str, config: str = "") -> str:
    """A file-name-safe label for the Hugging Face dataset ``dataset`` (its last path component) and its config."""
    name = "-".join(part for part in (Path(dataset.rstrip("/")).name, config) if part)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "dataset"


def corpus_source(
    name: str,
    data_dir: Path | None = None,
    hf_cache_dir: Path | None = None,
    offline: bool = False,
    dataset: str = "",
    dataset_config: str = "",
    text_column: str = "",
    splits: Sequence[str] = (),
) -> CorpusSource:
    """The source of corpus ``name`` (lowercased when ``name`` is "ptb"), from the first that is given of:

    - ``data_dir``: a folder with train.txt, valid.txt and test.txt (``TextDirSource``), or with the splits in another
      form ``datasets`` reads (:func:`~deq_lm.data.local_datasets.read_dataset_folder`; ``dataset_config``: the config
      of a folder of data files with a README);
    - ``dataset``: a Hugging Face dataset name (or a local folder ``datasets.load_dataset`` reads) with its config
      ``dataset_config``, downloaded and cached (``offline``: from the local cache only);
    - the Hugging Face corpus ``name`` (:func:`load_hf_source`).

    ``text_column`` and ``splits`` (the names of the train, valid and test splits) apply to the datasets; empty, they
    are found (:meth:`HFSource.from_dataset`, ``HF_SPLIT_NAMES``).

    Raises:
        CorpusError, CorpusNotFoundError, CorpusDownloadError: one line each, saying what to do.
    """
    lower = HF_CORPORA[name].lower if name in HF_CORPORA else False
    if data_dir is not None and dataset:
        raise CorpusError(
            f"data.data_dir ({data_dir}) and data.dataset ({dataset}) both name the text: set only one of them."
        )
    if data_dir is not None:
        data_dir = Path(data_dir)
        if data_dir.is_file():
            raise CorpusError(f"--data-dir {data_dir} is a file; it takes {DATA_DIR_FORMS}.")
        if not is_text_folder(data_dir):
            found, origin = read_dataset_folder(data_dir, dataset_config or None)
            label = data_dir.resolve().name or "corpus"
            return HFSource.from_dataset(found, label, text_column, lower, splits, origin)
        source = TextDirSource(data_dir, lower=lower)
        options = [key for key, value in (("data.text_column", text_column), ("data.splits", splits),
                                          ("data.dataset_config", dataset_config)) if value]  # fmt: skip
        if options:
            raise CorpusError(
                f"{data_dir} is a folder of train.txt, valid.txt and test.txt, which has no columns, split names or "
                f"configs: leave {', '.join(options)} empty."
            )
        return source
    if dataset:
        origin = f"Hugging Face dataset {dataset!r}" + (f", config {dataset_config!r}" if dataset_config else "")
        instead = f"check data.dataset and data.dataset_config, or pass --data-dir DIR: {DATA_DIR_FORMS}"
        found = load_hub_dataset(dataset, (dataset,), dataset_config or None, hf_cache_dir, offline, instead)
        label = hub_label(dataset, dataset_config)
        return HFSource.from_dataset(found, label, text_column, lower, splits, origin)
    return load_hf_source(name, hf_cache_dir, offline, text_column, splits)
