"""Hugging Face corpora: ``datasets`` downloads and caches them unless the user asks for offline mode
(HF_HUB_OFFLINE / HF_DATASETS_OFFLINE in the environment, or ``--offline`` on train and evaluate). Nothing here
touches the network: ``datasets.load_dataset`` is replaced by a recorder that notes the offline settings it sees and
returns a tiny in-memory dataset or raises the error ``datasets`` raises (no network: ConnectionError "Couldn't reach
... on the Hub"; offline and not cached: the same with "(OfflineModeIsEnabled)")."""

from __future__ import annotations

import os
from typing import Any

import datasets
import datasets.config
import huggingface_hub.constants
import pytest

from conftest import write_tiny_corpus
from deq_core.train.testing.faults import edit_saved_config
from deq_lm.data import CorpusDownloadError, CorpusNotFoundError, HFSource, load_hf_source
from deq_lm.evaluate import main as evaluate_main
from deq_lm.train import main as train_main

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}
NOT_CACHED = "Couldn't reach 'ptb_text_only' on the Hub (OfflineModeIsEnabled)"
NO_NETWORK = "Couldn't reach the dataset on the Hub (LocalEntryNotFoundError)"


class RecordedLoader:
    """Stands for ``datasets.load_dataset``: records each call with the offline settings in force during it, then
    raises ``error`` or returns a three-split dataset with a "sentence" column."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def __call__(self, path: str, name: str | None = None, **kwargs: Any) -> datasets.DatasetDict:
        self.calls.append(
            {
                "path": path,
                "name": name,
                "kwargs": kwargs,
                "env": {var: os.environ.get(var) for var in OFFLINE_VARS},
                "flags": (
                    datasets.config.HF_HUB_OFFLINE,
                    datasets.config.HF_DATASETS_OFFLINE,
                    huggingface_hub.constants.HF_HUB_OFFLINE,
                ),
            }
        )
        if self.error is not None:
            raise self.error
        rows = {"train": ["the cat sat", "a dog ran"], "validation": ["the dog sat"], "test": ["a cat ran"]}
        return datasets.DatasetDict({k: datasets.Dataset.from_dict({"sentence": v}) for k, v in rows.items()})

    def offline_in_every_call(self) -> bool:
        return bool(self.calls) and all(
            all(call["flags"]) and (call["env"]["HF_HUB_OFFLINE"] or "").upper() in TRUE_VALUES for call in self.calls
        )

    def online_in_every_call(self) -> bool:
        return bool(self.calls) and all(
            not any(call["flags"])
            and not any((value or "").upper() in TRUE_VALUES for value in call["env"].values())
            and not {"download_mode", "download_config"} & set(call["kwargs"])
            for call in self.calls
        )


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """No offline setting anywhere (whatever the environment the tests run in)."""
    for var in OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def _record(monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> RecordedLoader:
    loader = RecordedLoader(error)
    monkeypatch.setattr(datasets, "load_dataset", loader)
    return loader


# --- the loader ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [{}, {"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "false"}])
def test_without_offline_settings_datasets_may_download(online, monkeypatch, tmp_path, env):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    loader = _record(monkeypatch)
    source = load_hf_source("ptb", cache_dir=tmp_path / "hf")
    assert isinstance(source, HFSource) and list(source.lines("valid")) == ["the dog sat"]
    assert [(c["path"], c["name"], c["kwargs"]) for c in loader.calls] == [
        ("ptb_text_only", None, {"cache_dir": str(tmp_path / "hf")})
    ]
    assert loader.online_in_every_call(), loader.calls


@pytest.mark.parametrize(
    "how", [{"HF_HUB_OFFLINE": "1"}, {"HF_DATASETS_OFFLINE": "TRUE"}, {"HF_HUB_OFFLINE": "yes"}, "offline=True"]
)
def test_offline_when_asked_and_a_missing_corpus_is_one_line(online, monkeypatch, how):
    loader = _record(monkeypatch, ConnectionError(NOT_CACHED))
    if isinstance(how, dict):
        for var, value in how.items():
            monkeypatch.setenv(var, value)
    before = {var: os.environ.get(var) for var in OFFLINE_VARS}
    with pytest.raises(CorpusNotFoundError) as error:
        load_hf_source("ptb", offline=True) if how == "offline=True" else load_hf_source("ptb")
    message = str(error.value)
    assert message.startswith("corpus 'ptb' is not in the local Hugging Face cache") and "\n" not in message
    assert "--data-dir" in message and "HF_HOME" in message and "OfflineModeIsEnabled" in message
    assert [c["path"] for c in loader.calls] == ["ptb_text_only", "ptb-text-only/ptb_text_only"]
    assert loader.offline_in_every_call(), loader.calls
    assert {var: os.environ.get(var) for var in OFFLINE_VARS} == before  # offline mode is undone afterwards
    assert not datasets.config.HF_HUB_OFFLINE and not huggingface_hub.constants.HF_HUB_OFFLINE


@pytest.mark.parametrize("error", [ConnectionError(NO_NETWORK), TimeoutError("timed out")])
def test_a_network_failure_is_one_line_saying_what_to_do(online, monkeypatch, error):
    loader = _record(monkeypatch, error)
    with pytest.raises(CorpusDownloadError) as raised:
        load_hf_source("wikitext-103")
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        "could not download corpus 'wikitext-103' (Hugging Face dataset 'wikitext', config 'wikitext-103-v1')"
    ), message
    assert str(error) in message and "check the network" in message
    assert "--offline" in message and "--data-dir" in message
    assert len(loader.calls) == 1  # no second ~25 s of retries on the other name of the dataset


def test_a_dataset_missing_online_names_every_name_tried(online, monkeypatch):
    loader = _record(monkeypatch, datasets.exceptions.DatasetNotFoundError("Dataset 'x' doesn't exist on the Hub"))
    with pytest.raises(CorpusNotFoundError) as error:
        load_hf_source("ptb")
    message = str(error.value)
    assert "\n" not in message and "not in the local Hugging Face cache" not in message
    assert message.startswith("could not load corpus 'ptb' from the Hugging Face Hub"), message
    assert "ptb-text-only/ptb_text_only" in message and "--data-dir" in message
    assert len(loader.calls) == 2 and loader.online_in_every_call()


# --- the command lines -----------------------------------------------------------------------------------------------


def _one_line(capsys: pytest.CaptureFixture[str], prog: str) -> str:
    err = capsys.readouterr().err
    prefix = f"python -m deq_lm.{prog}: error: "
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err
    return err[len(prefix) :]


def test_train_offline_flag(online, monkeypatch, tmp_path, capsys):
    loader = _record(monkeypatch, ConnectionError(NOT_CACHED))
    args = ["--config", "ptb-deq-trellisnet", "--output-dir", str(tmp_path / "run")]
    assert train_main([*args, "--offline"]) == 2
    assert _one_line(capsys, "train").startswith("corpus 'ptb' is not in the local Hugging Face cache")
    assert loader.offline_in_every_call(), loader.calls

    loader = _record(monkeypatch, ConnectionError(NO_NETWORK))
    assert train_main(args) == 2
    err = _one_line(capsys, "train")
    assert err.startswith("could not download corpus 'ptb'") and "check the network" in err, err
    assert loader.online_in_every_call(), loader.calls


def test_evaluate_offline_flag(online, monkeypatch, tmp_path, capsys):
    run = tmp_path / "run"
    corpus = write_tiny_corpus(tmp_path / "corpus")
    assert train_main(["--config", "tiny-lm-transformer-xl", "--data-dir", str(corpus), "--output-dir", str(run),
                       "steps=1", "eval_every=1"]) == 0  # fmt: skip
    edit_saved_config(run, lambda saved: saved["config"]["data"].update(corpus="ptb", data_dir=""))  # PTB from the Hub
    capsys.readouterr()

    loader = _record(monkeypatch, ConnectionError(NOT_CACHED))
    assert evaluate_main(["--checkpoint", str(run), "--no-sweep", "--offline"]) == 2
    assert _one_line(capsys, "evaluate").startswith("corpus 'ptb' is not in the local Hugging Face cache")
    assert loader.offline_in_every_call(), loader.calls

    loader = _record(monkeypatch, ConnectionError(NO_NETWORK))
    assert evaluate_main(["--checkpoint", str(run), "--no-sweep"]) == 2
    assert "check the network" in _one_line(capsys, "evaluate")
    assert loader.online_in_every_call(), loader.calls
