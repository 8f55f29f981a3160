"""A local folder of data in a form ``datasets`` reads, as a ``datasets.DatasetDict`` of its splits.

The forms, in the order they are recognized:

1. a folder written by ``DatasetDict.save_to_disk`` (it holds dataset_dict.json): ``datasets.load_from_disk``;
2. a folder written by ``Dataset.save_to_disk`` (state.json): one Dataset, no splits, refused with what to do;
3. a folder whose subfolders were written by ``Dataset.save_to_disk``, one per split (DIR/train, DIR/validation,
   DIR/test): each with ``datasets.load_from_disk``, the subfolder's name the split's;
4. a folder of data files (parquet, arrow, json, jsonl, csv, txt), their names giving the splits (train.parquet,
   valid.jsonl, data/test-00000-of-00001.parquet, ...): ``datasets.load_dataset(DIR)`` in offline mode, which infers
   the format and the splits as it does for a dataset repository (a README's ``configs`` are honoured, with
   ``config``).

The classic folder of train.txt, valid.txt and test.txt is not read here (``TextDirSource``): :func:`is_text_folder`
tells the two apart. Hidden files and folders (the tokenized cache, .deq_lm_cache) are ignored, as ``datasets`` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import CorpusError, describe_error
from .hub import hf_offline

SPLITS_SAVED = "dataset_dict.json"  # written by DatasetDict.save_to_disk
DATASET_SAVED = "state.json"  # written by Dataset.save_to_disk
TEXT_FILES = ("train.txt", "valid.txt", "test.txt")  # the classic folder
# Extensions of the data files read through ``load_dataset`` (the text formats among those ``datasets`` knows).
DATA_FILE_SUFFIXES = frozenset({".parquet", ".arrow", ".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".txt"})


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith((".", "__")) for part in path.relative_to(root).parts)


def data_files(folder: Path) -> list[Path]:
    """The data files below ``folder`` (any depth, hidden ones left out), sorted."""
    return sorted(
        p for p in folder.rglob("*") if p.suffix.lower() in DATA_FILE_SUFFIXES and p.is_file() and _visible(p, folder)
    )


def split_folders(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` written by ``Dataset.save_to_disk`` (one per split), sorted."""
    return sorted(p for p in folder.iterdir() if (p / DATASET_SAVED).is_file() and _visible(p, folder))


def _saved_empty(state_file: Path) -> bool:
    """Whether the Dataset whose ``save_to_disk`` state file is ``state_file`` was saved with no data file (no rows;
    ``load_from_disk`` fails on it with an IndexError)."""
    try:
        return json.loads(state_file.read_text()).get("_data_files") == []
    except (OSError, ValueError, AttributeError):
        return False  # unreadable: load_from_disk says why


def is_text_folder(folder: Path) -> bool:
    """Whether ``folder`` is read as the classic train.txt / valid.txt / test.txt folder: it is not a folder (its
    error says so), or it holds all three files, or it is no ``save_to_disk`` folder and holds no data file besides
    them (then the classic folder's error names the missing ones)."""
    folder = Path(folder)
    if not folder.is_dir():
        return True
    if all((folder / name).is_file() for name in TEXT_FILES):
        return True
    if (folder / SPLITS_SAVED).is_file() or (folder / DATASET_SAVED).is_file() or split_folders(folder):
        return False
    return {p.relative_to(folder).as_posix() for p in data_files(folder)} <= set(TEXT_FILES)


def read_dataset_folder(folder: Path, config: str | None = None) -> tuple[Any, str]:
    """The splits held in ``folder`` (any form of the module's list but the classic one) and what that form is, for
    messages: (``datasets.DatasetDict``, e.g. "the parquet files in DIR").

    Args:
        folder: the folder (``--data-dir``).
        config: for data files, the config of the folder's README to read (None: its default or only one); it does
            not apply to ``save_to_disk`` folders.

    Raises:
        CorpusError: one Dataset saved without splits; a split saved with no rows; an empty data file; files of
            several formats; a config given for a ``save_to_disk`` folder; a file ``datasets`` cannot read, or a split
            it finds no rows in (its error is in the message).
    """
    import datasets

    folder = Path(folder)
    saved = split_folders(folder)
    if (folder / SPLITS_SAVED).is_file() or (folder / DATASET_SAVED).is_file() or saved:
        if config:
            raise CorpusError(
                f"data.dataset_config={config} applies to data files, not to the save_to_disk folder {folder}: "
                "leave it empty."
            )
        if (folder / DATASET_SAVED).is_file() and not (folder / SPLITS_SAVED).is_file():
            raise CorpusError(
                f"{folder} holds one Dataset written by save_to_disk, without splits: save a DatasetDict with train, "
                f"validation and test splits there, or save each split's Dataset to {folder}/train, "
                f"{folder}/validation and {folder}/test."
            )
        empty = [p.relative_to(folder).as_posix() for p in folder.glob(f"*/{DATASET_SAVED}") if _saved_empty(p)]
        if empty:
            raise CorpusError(
                f"split folder(s) {', '.join(sorted(p.rpartition('/')[0] for p in empty))} in {folder} were saved with "
                "no rows: every split needs text."
            )
        try:
            if (folder / SPLITS_SAVED).is_file():
                return datasets.load_from_disk(str(folder)), f"the DatasetDict saved in {folder}"
            found = datasets.DatasetDict({p.name: datasets.load_from_disk(str(p)) for p in saved})
            return found, f"the Datasets saved in the split folders of {folder}"
        except Exception as error:
            what = describe_error(error)
            raise CorpusError(f"could not read {folder} with datasets.load_from_disk: {what}.") from error
    files = data_files(folder)
    empty = [p.relative_to(folder).as_posix() for p in files if p.stat().st_size == 0]
    if empty:
        raise CorpusError(f"data file(s) {', '.join(empty)} in {folder} are empty.")
    kinds = sorted({p.suffix.lower().lstrip(".") for p in files})
    try:
        with hf_offline():  # a local folder: never wait for the network
            dataset = datasets.load_dataset(str(folder), config)
    except Exception as error:
        raise CorpusError(
            f"could not read the {'/'.join(kinds)} files in {folder} with datasets.load_dataset: "
            f"{describe_error(error)}; the files must all be of one format, named by split (train, validation or "
            "valid, test)."
        ) from error
    return dataset, f"the {'/'.join(kinds)} files in {folder}"
