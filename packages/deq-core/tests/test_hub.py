"""deq_core.train.hub: a model saved with save_pretrained loads back with from_pretrained, from its folder or from a
Hub repo id (a Hugging Face cache laid out by the test, the client offline); push_to_hub uploads the folder
save_pretrained writes (huggingface_hub's HfApi replaced by deq_core.train.testing.hub's stand-in, no network); the
model card holds the run's final metrics and configuration; every folder that is not such a model is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
import torch
from torch import nn

from deq_core.train.checkpoints import WEIGHTS_FILE, CheckpointError, load_weights
from deq_core.train.hub import (
    CardFields,
    HubModel,
    HubModelError,
    json_writer,
    required_file,
    run_record,
    weights_writer,
)
from deq_core.train.testing.hub import COMMIT, StandInHub

SRC = str(Path(__file__).resolve().parents[1] / "src")


class Toy(nn.Module, HubModel, library_name="deq-core-test", pipeline_tag="tabular-regression"):
    """A model of one linear map whose width is its config."""

    def __init__(self, width: int, record: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.width, self.record = width, record
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def hub_files(self):
        return {
            "config.json": json_writer({"width": self.width, "record": self.record}),
            WEIGHTS_FILE: weights_writer(self),
        }

    @classmethod
    def _from_folder(cls, folder: Path, config: dict[str, Any], **options: Any) -> Toy:
        if not isinstance(config.get("width"), int):
            raise HubModelError(f"{folder}: not a toy model")
        model = cls(config["width"], config.get("record"))
        load_weights(model, required_file(folder, WEIGHTS_FILE, "the weights", "deq-core-test"))
        return model.eval()

    def card_fields(self) -> CardFields:
        solver = {"solver": "anderson", "max_iter": 12, "tol": 0.0001}
        return CardFields(
            "A toy", "One linear map.", "Toy.from_pretrained('DIR')", solver, "## Extra\n\nmore", self.record
        )


def _same(a: nn.Module, b: nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def _run(root: Path) -> Path:
    """A run folder as the training skeleton writes it: config.json, metrics.jsonl, a checkpoint at step 4."""
    root.mkdir(parents=True)
    config = {"data": {"data_dir": "/home/someone/corpus", "T": 6}, "optim": {"lr": 0.01}}
    (root / "config.json").write_text(json.dumps({"name": "tiny-toy", "config": config}))
    rows = [
        {"step": 2, "split": "train", "loss": 2.0},
        {"step": 2, "split": "valid", "loss": 1.9, "acc": 0.25},
        {"step": 4, "split": "valid", "loss": 1.5, "acc": 0.5},
        {"step": 4, "split": "test", "loss": 1.6, "acc": 0.375},
        {"step": 6, "split": "valid", "loss": 1.2, "acc": 0.75},  # after the checkpoint: not its metrics
    ]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "checkpoints" / "step_0000004").mkdir(parents=True)
    return root


@pytest.fixture
def record(tmp_path: Path) -> dict[str, Any]:
    run = _run(tmp_path / "run")
    return run_record(run, run / "checkpoints" / "step_0000004", private_keys=["data.data_dir", "data.missing"])


def test_run_record_has_the_checkpoints_metrics_and_no_local_folder(record: dict[str, Any]) -> None:
    assert record["preset"] == "tiny-toy" and record["step"] == 4
    assert record["config"] == {"data": {"data_dir": "", "T": 6}, "optim": {"lr": 0.01}}
    assert record["metrics"] == {
        "valid": {"step": 4, "loss": 1.5, "acc": 0.5},
        "test": {"step": 4, "loss": 1.6, "acc": 0.375},
    }


def test_save_and_load_a_folder(tmp_path: Path, record: dict[str, Any]) -> None:
    model = Toy(3, record)
    model.save_pretrained(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded = Toy.from_pretrained(tmp_path / "out")
    assert isinstance(loaded, Toy) and loaded.width == 3 and loaded.record == record and not loaded.training
    _same(loaded, model)
    card = huggingface_hub.ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.library_name == "deq-core-test" and card.data.license == "mit"
    assert card.data.pipeline_tag == "tabular-regression" and "deep-equilibrium-model" in card.data.tags
    assert "# A toy" in card.text and "## Extra\n\nmore" in card.text and "Toy.from_pretrained('DIR')" in card.text
    assert (
        "## Equilibrium solver" in card.text
        and "| `max_iter` | `12` |" in card.text
        and "| `tol` | `0.0001` |" in card.text
    )
    assert "| valid | 4 | 1.5 | 0.5 |" in card.text and "| test | 4 | 1.6 | 0.375 |" in card.text
    assert "Preset `tiny-toy`, weights of step 4." in card.text and '"lr": 0.01' in card.text
    assert "/home/someone" not in card.text


def test_a_card_edited_by_hand_is_kept(tmp_path: Path) -> None:
    """huggingface_hub's rule: save_pretrained writes README.md only where there is none."""
    out = tmp_path / "out"
    Toy(2).save_pretrained(out)
    assert "Not recorded" in (out / "README.md").read_text()
    (out / "README.md").write_text("my own card\n")
    Toy(2).save_pretrained(out)
    assert (out / "README.md").read_text() == "my own card\n"


def test_load_a_repo_id_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Toy(4)
    model.save_pretrained(tmp_path / "out")
    hub = StandInHub(monkeypatch, tmp_path / "hub")
    hub.put("me/toy", tmp_path / "out")
    hub.offline()
    _same(Toy.from_pretrained("me/toy", cache_dir=hub.cache), model)
    with pytest.raises(HubModelError, match="me/other is not in the local Hugging Face cache"):
        Toy.from_pretrained("me/other", cache_dir=hub.cache)


def test_push_to_hub_uploads_the_saved_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record) -> None:
    """The mixin's push_to_hub: create the repo, then one upload of the folder save_pretrained writes (huggingface_hub's
    HfApi calls replaced by the stand-in, no network). The uploaded files load back through the repo id."""
    hub = StandInHub(monkeypatch, tmp_path / "hub")
    model = Toy(3, record)
    url = model.push_to_hub("me/toy", private=True, commit_message="first")
    assert url == f"https://hub.invalid/me/toy/commit/{COMMIT}"
    assert [name for name, _ in hub.calls] == ["create_repo", "upload_folder"]
    assert hub.calls[0][1]["private"] is True and hub.calls[0][1]["exist_ok"] is True
    assert hub.calls[1][1]["repo_type"] == "model" and hub.calls[1][1]["commit_message"] == "first"
    model.save_pretrained(tmp_path / "saved")
    assert hub.uploads["me/toy"] == {p.name: p.read_bytes() for p in (tmp_path / "saved").iterdir()}
    hub.offline()
    _same(Toy.from_pretrained("me/toy", cache_dir=hub.cache), model)


def test_what_is_not_a_saved_model_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    Toy(3).save_pretrained(out)
    with pytest.raises(HubModelError, match="is neither a folder nor a Hugging Face repo id"):
        Toy.from_pretrained(tmp_path / "no such" / "folder")
    with pytest.raises(HubModelError, match="is a file"):
        Toy.from_pretrained(out / "config.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HubModelError, match="has no config.json .* not a complete model folder of deq-core-test"):
        Toy.from_pretrained(empty)
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    (bad / "config.json").write_text("[1, 2]")
    with pytest.raises(HubModelError, match="is not a JSON object"):
        Toy.from_pretrained(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json cannot be read"):
        Toy.from_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({"width": 5}))  # weights of width 3
    with pytest.raises(CheckpointError, match="does not fit the model that config.json describes"):
        Toy.from_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({"width": 3}))
    torch.save(Toy(3).state_dict(), bad / WEIGHTS_FILE)  # a pickle under the weights' name: never unpickled
    with pytest.raises(CheckpointError, match="cannot be read as tensors"):
        Toy.from_pretrained(bad)
    (bad / WEIGHTS_FILE).unlink()
    with pytest.raises(HubModelError, match="has no model.safetensors"):
        Toy.from_pretrained(bad)
    for error in (HubModelError("x"),):
        assert isinstance(error, ValueError) and len(str(error).splitlines()) == 1


def test_hub_without_huggingface_hub_says_how_to_install_it() -> None:
    # sys.modules[name] = None makes `import name` fail, as when it is not installed.
    code = (
        "import sys\n"
        "sys.modules['huggingface_hub'] = None\n"
        "import deq_core.train, deq_core.train.checkpoints\n"
        "try:\n"
        "    import deq_core.train.hub\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "huggingface_hub" in lines[0] and "pip install 'deq-core[hub]'" in lines[0], lines
