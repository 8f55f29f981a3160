"""deq_vision.hub.PretrainedClassifier: a tiny MDEQ run saved with save_pretrained loads back with from_pretrained
(and with timm alone) into the model evaluate loads: same logits, same accuracy, the same DEQ layer (solvers, limits,
tolerances); its transform is the run's eval preprocessing; the model card holds the run's final metrics; a folder
that is not a deq-vision model is one line; push_to_hub uploads the folder through huggingface_hub (its HfApi
replaced by deq_core.train.testing.hub's stand-in: no network) and the repo id loads back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import huggingface_hub
import numpy as np
import pytest
import timm
import torch
from PIL import Image
from torch.utils.data import DataLoader

from conftest import learnable_images
from deq_core.train.checkpoints import CheckpointError
from deq_core.train.hub import HubModelError
from deq_core.train.metrics import read_metrics
from deq_core.train.run_config import load_config
from deq_core.train.testing.hub import COMMIT, StandInHub
from deq_vision import evaluate, train
from deq_vision.configs import Config
from deq_vision.data import build_datasets, build_transform, write_cifar_folder
from deq_vision.hub import PretrainedClassifier
from deq_vision.train import evaluate_loader, finish_eval

LAYER = ("solver", "max_iter", "tol", "stop_mode", "stop_over", "eval_max_iter", "eval_tol", "jacobian_samples")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(run, save_pretrained folder, CIFAR-format data folder) of tiny-mdeq (4 steps on 16x16 colour images)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mdeq")
    cifar = root / "cifar"
    write_cifar_folder(cifar, *learnable_images(96))
    run = root / "run"
    args = ["--config", "tiny-mdeq", "steps=4", "eval_every=4", "save_every=4", "--data-dir", str(cifar)]
    assert train.main([*args, "--output-dir", str(run)]) == 0
    PretrainedClassifier.from_run(run).save_pretrained(root / "saved")
    return run, root / "saved", cifar


def _images(seed: int = 0) -> torch.Tensor:
    return torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


def _accuracy(model: torch.nn.Module, run: Path, cifar: Path) -> dict[str, float]:
    _, eval_set = build_datasets(load_config(run, Config)[1], cifar)
    return finish_eval(evaluate_loader(model, DataLoader(eval_set, batch_size=32), torch.device("cpu")))


def test_the_saved_folder_is_timms_with_the_runs_settings(saved: tuple[Path, Path, Path]) -> None:
    run, out, _ = saved
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    run_deq = json.loads((run / "config.json").read_text())["config"]["deq"]
    assert config["architecture"] == "mdeq_mini" and config["num_classes"] == 10 and "deq_vision_version" in config
    deq = config["model_args"]["deq"]
    assert deq["solver"] == "broyden" and deq["max_iter"] == run_deq["max_iter"] == 6
    assert all(deq[key] == run_deq[key] for key in deq)
    assert config["pretrained_cfg"]["input_size"] == [3, 16, 16]
    assert config["training"]["preset"] == "tiny-mdeq" and config["training"]["step"] == 4
    card = huggingface_hub.ModelCard.load(out / "README.md")
    assert card.data.library_name == "deq-vision" and card.data.pipeline_tag == "image-classification"
    assert '| `solver` | `"broyden"` |' in card.text and "| `max_iter` | `6` |" in card.text
    assert "| eval | 4 |" in card.text


def test_from_pretrained_is_the_run_with_its_deq_layer_and_accuracy(saved: tuple[Path, Path, Path]) -> None:
    run, out, cifar = saved
    _, reference, _ = evaluate.load_model(run)
    model = PretrainedClassifier.from_pretrained(out)
    assert not model.training
    x = _images()
    torch.testing.assert_close(_logits(model, x), _logits(reference, x), rtol=0, atol=0)
    ours, theirs = model.model.deq, reference.deq  # solvers and backward strategies: dataclasses, compared by value
    assert [getattr(ours, key) for key in LAYER] == [getattr(theirs, key) for key in LAYER]
    assert ours.backward == theirs.backward and ours.max_iter == 6
    accuracy = _accuracy(model.model, run, cifar)  # the timm model, as evaluate gets it
    assert accuracy == _accuracy(reference, run, cifar)
    # The card's numbers are the run's last evaluation of these weights; evaluated again here, the same to float32
    # rounding of the loss sums (the accuracy is a count).
    (logged,) = [row for row in read_metrics(run / "metrics.jsonl") if row["split"] == "eval"]
    assert model.settings["training"]["metrics"]["eval"]["acc"] == logged["acc"] == pytest.approx(accuracy["acc"])
    assert accuracy["loss"] == pytest.approx(logged["loss"], rel=1e-5)


def test_timm_alone_loads_the_folder_and_transform_is_the_runs(saved: tuple[Path, Path, Path]) -> None:
    run, out, _ = saved
    model = PretrainedClassifier.from_pretrained(out)
    x = _images(1)
    torch.testing.assert_close(
        _logits(timm.create_model(f"local-dir:{out}", pretrained=True), x), _logits(model, x), rtol=0, atol=0
    )
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype(np.uint8))
    expected = build_transform(load_config(run, Config)[1], training=False)(image)
    torch.testing.assert_close(model.transform()(image), expected, rtol=0, atol=0)
    assert tuple(expected.shape) == (3, 16, 16)


def test_a_folder_that_is_not_a_deq_vision_model_is_one_line(saved, tmp_path: Path) -> None:
    _, out, _ = saved

    def changed(name: str, change: Any) -> Path:
        folder = tmp_path / name
        shutil.copytree(out, folder)
        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(config))
        return folder

    def timm_resnet(config: dict[str, Any]) -> None:
        config.update(architecture="resnet18", model_args={})
        config.pop("deq_vision_version")

    planted = changed("planted", lambda c: c["model_args"]["deq"].update(solver="planted_solver:Solver"))
    cases = [
        (changed("timm", timm_resnet), HubModelError, "is timm's 'resnet18', not saved by deq-vision"),
        (changed("classes", lambda c: c["model_args"].update(num_classes=7)), CheckpointError, "does not fit"),
        (changed("no-layout", lambda c: c.pop("pretrained_cfg")), HubModelError, "not a deq-vision model's"),
        (planted, ValueError, "import path 'planted_solver:Solver'"),
    ]
    (tmp_path / "weightless").mkdir()
    shutil.copy(out / "config.json", tmp_path / "weightless" / "config.json")
    cases.append((tmp_path / "weightless", HubModelError, "has no model.safetensors"))
    for folder, error, message in cases:
        with pytest.raises(error, match=message) as raised:
            PretrainedClassifier.from_pretrained(folder)
        assert len(str(raised.value).splitlines()) == 1
    layer = load_config(saved[0], Config)[1].deq.layer()  # the user's own layer instead: loads
    model = PretrainedClassifier.from_pretrained(planted, deq=layer)
    torch.testing.assert_close(_logits(model, _images()), _logits(evaluate.load_model(saved[0])[1], _images()))


def test_push_to_hub_and_load_the_repo(saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mixin's push_to_hub through deq_core.train.testing.hub's stand-in of HfApi (no network); the repo id then
    loads from the Hugging Face cache with from_pretrained and with timm's hf-hub: name."""
    run, out, _ = saved
    hub = StandInHub(monkeypatch, tmp_path / "hub")
    model = PretrainedClassifier.from_pretrained(out)
    assert model.push_to_hub("me/mdeq-tiny") == f"https://hub.invalid/me/mdeq-tiny/commit/{COMMIT}"
    uploaded = hub.uploads["me/mdeq-tiny"]
    assert sorted(uploaded) == ["README.md", "config.json", "model.safetensors"]
    assert uploaded["model.safetensors"] == (out / "model.safetensors").read_bytes()
    hub.offline()
    x = _images(2)
    reference = _logits(evaluate.load_model(run)[1], x)
    loaded = PretrainedClassifier.from_pretrained("me/mdeq-tiny", cache_dir=hub.cache)
    torch.testing.assert_close(_logits(loaded, x), reference, rtol=0, atol=0)
    by_timm = timm.create_model("hf-hub:me/mdeq-tiny", pretrained=True, cache_dir=hub.cache)
    torch.testing.assert_close(_logits(by_timm, x), reference, rtol=0, atol=0)
