"""``--data-dir`` in any form ``datasets`` reads (save_to_disk folders, parquet / arrow / json / jsonl / txt files),
and ``data.dataset`` (a Hugging Face dataset name with its config): the same text gives the same tokens and vocabulary
as the folder of train.txt, valid.txt and test.txt; what cannot be used is one line saying what to do.

Every dataset here is written by the test into its temporary folder; ``datasets``' own cache is pointed there too, and
nothing reaches the network (local folders are read in offline mode; the Hub name is routed to a recorder)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import datasets
import datasets.config
import huggingface_hub.constants
import pyarrow as pa
import pytest
import torch

from conftest import run_module, write_tiny_corpus
from deq_lm.data import CorpusError, CorpusNotFoundError, HFSource, TextDirSource, corpus_source, load_corpus
from deq_lm.evaluate import main as evaluate_main
from deq_lm.train import main as train_main

HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}  # our split -> the name datasets gives it
TRAIN = ["--config", "tiny-lm-transformer-xl", "steps=1", "eval_every=1"]


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``datasets`` writes what it converts under the test's folder, never the user's cache."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


def text_folder(tmp_path: Path) -> Path:
    return write_tiny_corpus(tmp_path / "txt", n_train=60)


def split_lines(folder: Path) -> dict[str, list[str]]:
    return {split: (folder / f"{split}.txt").read_text().splitlines() for split in HF_SPLITS}


def rows(lines: list[str], column: str = "text") -> dict[str, list[Any]]:
    """A table with the text in ``column`` and a number column beside it (the text column must be found)."""
    return {column: lines, "n": list(range(len(lines)))}


def dataset_dict(lines: dict[str, list[str]], column: str = "text") -> datasets.DatasetDict:
    return datasets.DatasetDict({HF_SPLITS[s]: datasets.Dataset.from_dict(rows(v, column)) for s, v in lines.items()})


def write_arrow(path: Path, table: dict[str, list[Any]]) -> None:
    data = pa.table(table)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)


def write_form(form: str, lines: dict[str, list[str]], folder: Path) -> Path:
    """The splits ``lines`` written to ``folder`` in ``form``."""
    folder.mkdir(parents=True)
    if form == "save_to_disk DatasetDict":
        dataset_dict(lines).save_to_disk(str(folder))
    elif form == "save_to_disk Dataset per split":
        for split, name in HF_SPLITS.items():
            datasets.Dataset.from_dict(rows(lines[split])).save_to_disk(str(folder / name))
    elif form == "parquet":
        for split, name in HF_SPLITS.items():
            datasets.Dataset.from_dict(rows(lines[split])).to_parquet(str(folder / f"{name}.parquet"))
    elif form == "arrow":
        for split, name in HF_SPLITS.items():
            write_arrow(folder / f"{name}.arrow", rows(lines[split]))
    elif form == "json":  # JSON Lines in .json files, the only string column named otherwise
        for split, name in HF_SPLITS.items():
            text = "".join(json.dumps({"sentence": line, "n": i}) + "\n" for i, line in enumerate(lines[split]))
            (folder / f"{name}.json").write_text(text)
    elif form == "jsonl":  # valid, not validation; in a subfolder
        (folder / "data").mkdir()
        for split in HF_SPLITS:
            text = "".join(json.dumps({"text": line}) + "\n" for line in lines[split])
            (folder / "data" / f"{split}.jsonl").write_text(text)
    elif form == "text":  # txt files named as datasets names splits
        for split, name in HF_SPLITS.items():
            (folder / f"{name}.txt").write_text("\n".join(lines[split]) + "\n")
    else:
        raise AssertionError(form)
    return folder


FORMS = ["save_to_disk DatasetDict", "save_to_disk Dataset per split", "parquet", "arrow", "json", "jsonl", "text"]
ORIGINS = {  # what a run's first line says the text is, before the folder's path
    "save_to_disk DatasetDict": "the DatasetDict saved in",
    "save_to_disk Dataset per split": "the Datasets saved in the split folders of",
    "text": "the txt files in",
}


@pytest.mark.parametrize("form", FORMS)
def test_each_form_gives_the_tokens_and_vocabulary_of_the_text_folder(tmp_path, form):
    txt = text_folder(tmp_path)
    (txt / "train.txt").write_text((txt / "train.txt").read_text() + "\n\nThe END\n")  # blank lines, case: kept
    lines = split_lines(txt)
    folder = write_form(form, lines, tmp_path / "data")
    for lower, name in ((False, "mine"), (True, "ptb")):  # ptb is lowercased, whatever the form
        source = corpus_source(name, folder)
        assert isinstance(source, HFSource) and source.lower is lower and source.label == "data"
        assert source.origin == f"{ORIGINS.get(form, f'the {form} files in')} {folder}"
        assert source.text_column == ("sentence" if form == "json" else "text")
        assert list(source.lines("valid")) == lines["valid"]
        reference = load_corpus(TextDirSource(txt, lower=lower), tmp_path / "cache")
        corpus = load_corpus(source, tmp_path / "cache")
        assert corpus.tokenizer.itos == reference.tokenizer.itos
        assert ("The" in corpus.tokenizer.itos) is not lower
        for split in HF_SPLITS:
            assert torch.equal(corpus.split(split), reference.split(split)), (form, split)
        assert load_corpus(corpus_source(name, folder), tmp_path / "cache").from_cache


def test_changed_data_files_are_tokenized_again(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    folder = write_form("parquet", lines, tmp_path / "data")
    first = load_corpus(corpus_source("mine", folder), tmp_path / "cache")
    datasets.Dataset.from_dict(rows([*lines["valid"], "a dog ran"])).to_parquet(str(folder / "validation.parquet"))
    second = load_corpus(corpus_source("mine", folder), tmp_path / "cache")
    assert not second.from_cache and second.valid.numel() == first.valid.numel() + 4


def test_text_column_and_split_names_can_be_given(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    parts = {"train": "fit", "valid": "dev", "test": "holdout"}
    folder = tmp_path / "data"
    datasets.DatasetDict(
        {parts[s]: datasets.Dataset.from_dict({"body": v, "title": ["x"] * len(v)}) for s, v in lines.items()}
    ).save_to_disk(str(folder))
    source = corpus_source("mine", folder, text_column="body", splits=("fit", "dev", "holdout"))
    assert list(source.lines("test")) == lines["test"] and source.split_name("valid") == "dev"
    with pytest.raises(CorpusError, match=r"^dataset 'data' has no text column: .*set data.text_column=NAME\.$"):
        corpus_source("mine", folder, splits=("fit", "dev", "holdout"))  # two string columns, none called text


def test_train_and_evaluate_read_a_parquet_folder(tmp_path, capsys):
    folder = write_form("parquet", split_lines(text_folder(tmp_path)), tmp_path / "data")
    run = tmp_path / "run"
    assert train_main([*TRAIN, "--data-dir", str(folder), "--output-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"language modeling on column 'text' of the parquet files in {folder}, word vocabulary" in out, out
    assert list((folder / ".deq_lm_cache").glob("data-word-*.pt"))  # the tokenized cache beside the data, as for txt
    moved = tmp_path / "moved"
    folder.rename(moved)
    assert evaluate_main(["--checkpoint", str(run), "--no-sweep", "--data-dir", str(moved)]) == 0
    assert capsys.readouterr().out.startswith("test: loss ")


# --- a Hugging Face dataset by name (data.dataset, data.dataset_config) ----------------------------------------------


def write_dataset_repository(folder: Path, lines: dict[str, list[str]]) -> Path:
    """A local folder laid out as a Hub dataset repository with two configs (README front matter): ``raw`` and
    ``upper`` (the same text in capitals), column "page"; ``datasets.load_dataset(folder, config)`` reads it as it
    reads a Hub name."""
    configs = []
    for config, change in (("raw", str), ("upper", str.upper)):
        (folder / config).mkdir(parents=True)
        files = []
        for split, name in HF_SPLITS.items():
            page = [change(line) for line in lines[split]]
            datasets.Dataset.from_dict({"page": page}).to_parquet(str(folder / config / f"{name}-0.parquet"))
            files.append(f"  - split: {name}\n    path: {config}/{name}-*")
        configs.append(f"- config_name: {config}\n  data_files:\n" + "\n".join(files))
    (folder / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n# two configs\n")
    return folder


def test_dataset_and_its_config_are_what_load_dataset_reads(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    repository = str(write_dataset_repository(tmp_path / "repo", lines))
    source = corpus_source("mine", dataset=repository, dataset_config="upper", offline=True)
    assert isinstance(source, HFSource) and source.text_column == "page" and source.label == "repo-upper"
    assert list(source.lines("test")) == [line.upper() for line in lines["test"]]
    assert source.origin == f"Hugging Face dataset {repository!r}, config 'upper'"
    raw = corpus_source("mine", dataset=repository, dataset_config="raw", offline=True)
    assert list(raw.lines("valid")) == lines["valid"]
    with pytest.raises(CorpusNotFoundError) as error:
        corpus_source("mine", dataset=repository, dataset_config="nope")
    message = str(error.value)
    assert "\n" not in message and "BuilderConfig 'nope' not found" in message and "'raw', 'upper'" in message
    assert "data.dataset_config" in message, message


def test_a_hub_name_goes_to_load_dataset_with_its_config(monkeypatch, tmp_path):
    calls: list[tuple[Any, ...]] = []

    def recorder(path: str, name: str | None = None, **kwargs: Any) -> datasets.DatasetDict:
        flags = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE, os.environ["HF_HUB_OFFLINE"])
        calls.append((path, name, kwargs, flags))
        return dataset_dict({"train": ["a b"], "valid": ["b a"], "test": ["a"]})

    monkeypatch.setattr(datasets, "load_dataset", recorder)
    source = corpus_source("mine", dataset="Salesforce/wikitext", dataset_config="wikitext-103-raw-v1", offline=True)
    assert calls == [("Salesforce/wikitext", "wikitext-103-raw-v1", {"cache_dir": None}, (True, True, "1"))]
    assert source.label == "wikitext-wikitext-103-raw-v1" and list(source.lines("valid")) == ["b a"]


# --- what cannot be used: one line each ------------------------------------------------------------------------------


def error_of(folder: Path, **options: Any) -> str:
    with pytest.raises((CorpusError, CorpusNotFoundError)) as error:
        corpus_source("mine", folder, **options)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_missing_split(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    folder = write_form("parquet", lines, tmp_path / "data")
    (folder / "validation.parquet").unlink()
    assert error_of(folder) == (
        "dataset 'data' has no valid split (looked for ['validation', 'valid']; it has ['train', 'test']): set "
        "data.splits=TRAIN,VALID,TEST to its names."
    )
    assert "has no valid split (looked for ['dev']" in error_of(folder, splits=("train", "dev", "test"))
    single = tmp_path / "single"
    datasets.Dataset.from_dict(rows(lines["train"])).save_to_disk(str(single))
    message = error_of(single)
    assert message.startswith(f"{single} holds one Dataset written by save_to_disk, without splits: save a DatasetDict")


def test_no_text_column_and_column_not_of_strings(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    folder = tmp_path / "data"
    datasets.DatasetDict(
        {HF_SPLITS[s]: datasets.Dataset.from_dict({"n": list(range(len(v)))}) for s, v in lines.items()}
    ).save_to_disk(str(folder))
    assert error_of(folder).startswith("dataset 'data' has no text column: its train split has no column 'text' and 0")
    assert error_of(folder, text_column="body") == (
        "dataset 'data', split 'train' has no column 'body' (columns: ['n']); set data.text_column to the column that "
        "holds the text."
    )
    assert error_of(folder, text_column="n").startswith(
        "dataset 'data', split 'train': column 'n' holds int64 values, not text; set data.text_column to a column"
    )


def test_empty_split_and_empty_file(tmp_path):
    lines = split_lines(text_folder(tmp_path))
    no_rows = datasets.Features({"text": datasets.Value("string"), "n": datasets.Value("int64")})
    empty = datasets.Dataset.from_dict(rows([]), features=no_rows)
    in_memory = datasets.DatasetDict({**dataset_dict(lines), "test": empty})
    with pytest.raises(CorpusError, match=r"^dataset 'mine', split 'test' \('test'\) has no rows\.$"):
        HFSource.from_dataset(in_memory, "mine")
    saved = tmp_path / "saved"
    in_memory.save_to_disk(str(saved))  # load_from_disk would fail on it with an IndexError
    assert error_of(saved) == f"split folder(s) test in {saved} were saved with no rows: every split needs text."
    folder = write_form("jsonl", lines, tmp_path / "data")
    (folder / "data" / "test.jsonl").write_text("")
    assert error_of(folder) == f"data file(s) data/test.jsonl in {folder} are empty."
    folder = write_form("parquet", lines, tmp_path / "parquet")
    empty.to_parquet(str(folder / "test.parquet"))  # a file with no rows: datasets says so
    assert 'ValueError: Instruction "test" corresponds to no data!' in error_of(folder)


@pytest.mark.parametrize(
    ("name", "content", "cause"),
    [
        ("train.parquet", b"not a parquet file", "ArrowInvalid"),
        ("train.jsonl", b'{"text": "a"}\n{not json\n', "DatasetGenerationError"),
        ("train.txt", b"a b\n\xff\xfe c\n", "UnicodeDecodeError"),
    ],
)
def test_unreadable_file(tmp_path, name, content, cause):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / name).write_bytes(content)
    suffix = Path(name).suffix
    for split in ("validation", "test"):
        (folder / f"{split}{suffix}").write_bytes(b'{"text": "a"}\n' if suffix == ".jsonl" else b"a\n")
    if suffix == ".parquet":
        for split in ("validation", "test"):
            datasets.Dataset.from_dict({"text": ["a"]}).to_parquet(str(folder / f"{split}.parquet"))
    message = error_of(folder)
    kind = suffix.lstrip(".")
    assert message.startswith(f"could not read the {kind} files in {folder} with datasets.load_dataset: "), message
    assert cause in message and message.endswith("named by split (train, validation or valid, test).")


def test_mixed_formats_a_file_and_options_the_text_folder_has_not(tmp_path):
    txt = text_folder(tmp_path)
    lines = split_lines(txt)
    folder = write_form("parquet", lines, tmp_path / "data")
    (folder / "test.parquet").unlink()
    (folder / "test.jsonl").write_text(json.dumps({"text": "a"}) + "\n")
    assert "Couldn't infer the same data file format for all splits" in error_of(folder)
    assert error_of(folder / "train.parquet").startswith(f"--data-dir {folder / 'train.parquet'} is a file; it takes")
    assert error_of(txt, text_column="text") == (
        f"{txt} is a folder of train.txt, valid.txt and test.txt, which has no columns, split names or configs: leave "
        "data.text_column empty."
    )


def test_the_text_folder_keeps_its_errors(tmp_path):
    """A folder with only some of train.txt, valid.txt and test.txt and no other data is still the text folder."""
    txt = text_folder(tmp_path)
    (txt / "valid.txt").unlink()
    message = error_of(txt)
    assert message.startswith(f"corpus directory {txt} lacks valid.txt: it needs train.txt, valid.txt and test.txt")
    assert error_of(tmp_path / "nowhere").startswith(f"corpus directory {tmp_path / 'nowhere'} does not exist.")


def test_the_command_line_says_what_is_wrong_in_one_line(tmp_path, capsys):
    folder = write_form("parquet", split_lines(text_folder(tmp_path)), tmp_path / "data")
    (folder / "test.parquet").unlink()
    capsys.readouterr()
    assert train_main([*TRAIN, "--data-dir", str(folder), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err  # datasets' progress bars while it reads the files, then the error
    assert (
        err.endswith(
            "\npython -m deq_lm.train: error: dataset 'data' has no test split (looked for ['test']; it has ['train', "
            "'validation']): set data.splits=TRAIN,VALID,TEST to its names.\n"
        )
        and err.count("error") == 1
        and "Traceback" not in err
    ), err
    args = ["--data-dir", str(folder), "--output-dir", str(tmp_path / "run2"), *TRAIN, "data.dataset=wikitext"]
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("python -m deq_lm.train: error: data.dataset (wikitext) and data.data_dir")
        and err.count("\n") == 1
    ), err


# --- the README's download command without a network -----------------------------------------------------------------


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_download_without_the_corpus_or_a_network_is_one_line(tmp_path, monkeypatch, variable):
    monkeypatch.setenv(variable, "1")  # what a machine without network sees, at once instead of after the retries
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    done = run_module("deq_lm.data.download", "wikitext-103", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.startswith(
            "python -m deq_lm.data.download: error: corpus 'wikitext-103' is not in the local Hugging Face cache"
        )
        and done.stderr.count("\n") == 1
    ), done.stderr


def test_download_reports_the_splits_of_a_cached_corpus(tmp_path, monkeypatch, capsys):
    from deq_lm.data import download

    monkeypatch.setattr(
        datasets, "load_dataset", lambda *args, **kwargs: dataset_dict(split_lines(text_folder(tmp_path)))
    )
    assert download.main(["wikitext-103", "--offline"]) == 0
    assert capsys.readouterr().out == (
        "wikitext-103: train 60, valid 40, test 40 rows of column 'text', in the Hugging Face cache\n"
    )
