"""timm weights in and out: a trained run exported by ``python -m deq_vision.export`` loads back
through timm's own sources (``local-dir:``, ``hf-hub:``, ``pretrained_cfg_overlay=dict(file=...)`` / ``hf_hub_id``)
into the model evaluate loads, with the same logits and the same accuracy through timm's data pipeline; weight files
are safetensors only and a config.json never imports code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file
from timm.data import create_transform, resolve_data_config
from torch.utils.data import DataLoader, Subset

from conftest import learnable_images, offline_hub
from deq_core.train.checkpoints import checkpoint_path
from deq_core.train.run_config import load_config
from deq_core.train.testing.faults import EXPORT_FAULTS, check_export_fault
from deq_vision import evaluate, export, train
from deq_vision.configs import Config
from deq_vision.data import build_datasets, write_cifar_folder
from deq_vision.train import evaluate_loader, finish_eval


def _train_and_export(root: Path, preset: str) -> tuple[Path, Path, Path]:
    cifar = root / "cifar"
    write_cifar_folder(cifar, *learnable_images(96))
    run, out = root / "run", root / "out"
    args = ["--config", preset, "steps=4", "eval_every=4", "save_every=4", "--data-dir", str(cifar)]
    assert train.main([*args, "--output-dir", str(run)]) == 0
    assert export.main([str(run), str(out)]) == 0
    return run, out, cifar


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(run, export folder, CIFAR-format data folder) of a tiny-mdeq run (4 steps on 16x16 colour images)."""
    torch.set_num_threads(1)
    return _train_and_export(tmp_path_factory.mktemp("mdeq"), "tiny-mdeq")


def _images(seed: int = 0) -> torch.Tensor:
    return torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


def _reference(run: Path) -> torch.nn.Module:
    return evaluate.load_model(run)[1]


def test_export_writes_timms_layout(exported: tuple[Path, Path, Path]) -> None:
    run, out, _ = exported
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "mdeq_mini" and config["num_classes"] == 10
    args = config["model_args"]
    assert (args["num_classes"], args["in_chans"]) == (10, 3)
    saved = json.loads((run / "config.json").read_text())["config"]["deq"]
    assert args["deq"]["solver"] == "broyden" and args["deq"]["max_iter"] == saved["max_iter"] == 6
    assert all(args["deq"][k] == saved[k] for k in args["deq"])  # the run's layer, as plain settings
    cfg = config["pretrained_cfg"]
    assert cfg["input_size"] == [3, 16, 16] and cfg["crop_pct"] == 1.0 and cfg["interpolation"] == "bilinear"
    assert cfg["mean"] == [0.4914, 0.4822, 0.4465] and cfg["std"] == [0.2470, 0.2435, 0.2616]
    weights = load_file(str(out / "model.safetensors"))
    assert weights.keys() == _reference(run).state_dict().keys()


def test_local_dir_gives_the_logits_of_the_run(exported: tuple[Path, Path, Path]) -> None:
    run, out, _ = exported
    model = timm.create_model(f"local-dir:{out}", pretrained=True)
    assert model.pretrained_cfg["input_size"] == (3, 16, 16)
    x = _images()
    torch.testing.assert_close(_logits(model, x), _logits(_reference(run), x), rtol=0, atol=0)
    untrained = timm.create_model(f"local-dir:{out}")  # pretrained=False: the architecture only, as in timm
    assert not torch.equal(_logits(untrained, x), _logits(model, x))


def test_accuracy_through_timms_data_pipeline_equals_evaluates(exported: tuple[Path, Path, Path], capsys) -> None:
    """Evaluate's numbers, and the same from the exported model fed by timm's eval transform of its pretrained_cfg
    (resolve_data_config + create_transform) on the same images: the loss and accuracy agree exactly."""
    run, out, cifar = exported
    assert evaluate.main(["--checkpoint", str(run), "--data-dir", str(cifar), "--no-sweep"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    model = timm.create_model(f"local-dir:{out}", pretrained=True)
    _, eval_set = build_datasets(load_config(run, Config)[1], cifar)
    images = eval_set.dataset if isinstance(eval_set, Subset) else eval_set
    images.transform = create_transform(**resolve_data_config(model=model), is_training=False)
    ours = finish_eval(evaluate_loader(model, DataLoader(eval_set, batch_size=128), torch.device("cpu")))
    assert printed == f"eval ({len(eval_set)} images): " + ", ".join(f"{k} {v:.4g}" for k, v in ours.items())
    cfg, reference, _ = evaluate.load_model(run)
    _, theirs_set = build_datasets(cfg, cifar)
    theirs = finish_eval(evaluate_loader(reference, DataLoader(theirs_set, batch_size=128), torch.device("cpu")))
    assert ours == theirs


def test_pretrained_cfg_overlay_file_loads_the_weights(exported: tuple[Path, Path, Path]) -> None:
    run, out, _ = exported
    config = json.loads((out / "config.json").read_text())
    overlay = dict(config["pretrained_cfg"], file=str(out / "model.safetensors"))
    model = timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=overlay, **config["model_args"])
    x = _images(1)
    reference = _logits(_reference(run), x)
    torch.testing.assert_close(_logits(model, x), reference, rtol=0, atol=0)


def test_hf_hub_sources_load_the_weights(exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, out, _ = exported
    cache = offline_hub(tmp_path / "hub", out, monkeypatch)
    x = _images(2)
    reference = _logits(_reference(run), x)
    model = timm.create_model("hf-hub:me/mdeq-tiny", pretrained=True, cache_dir=cache)
    torch.testing.assert_close(_logits(model, x), reference, rtol=0, atol=0)
    args = json.loads((out / "config.json").read_text())["model_args"]
    overlay = dict(hf_hub_id="me/mdeq-tiny")
    model = timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=overlay, cache_dir=cache, **args)
    assert model.pretrained_cfg["hf_hub_filename"] == "model.safetensors"  # never timm's pytorch_model.bin
    torch.testing.assert_close(_logits(model, x), reference, rtol=0, atol=0)


def test_features_only_with_pretrained_weights(exported: tuple[Path, Path, Path]) -> None:
    run, out, _ = exported
    backbone = timm.create_model(f"local-dir:{out}", pretrained=True, features_only=True).eval()
    x = _images(3)
    with torch.no_grad():
        maps = backbone(x)
        _, expected = _reference(run).forward_intermediates(x)
    assert [tuple(m.shape) for m in maps] == [(6, 16, 16, 16), (6, 32, 8, 8)]
    for got, want in zip(maps, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_no_source_is_timms_error_and_other_formats_are_refused(exported, tmp_path: Path) -> None:
    _, out, _ = exported
    with pytest.raises(RuntimeError, match="No pretrained weights exist for mdeq_mini"):
        timm.create_model("mdeq_mini", pretrained=True)
    pickled = tmp_path / "weights.pth"
    torch.save(load_file(str(out / "model.safetensors")), pickled)
    with pytest.raises(ValueError, match="safetensors files only"):
        timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(file=str(pickled)))
    with pytest.raises(ValueError, match="safetensors files only"):
        timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(url="https://example.org/w.pth"))
    folder = tmp_path / "pickled"
    folder.mkdir()
    shutil.copy(out / "config.json", folder / "config.json")
    shutil.move(pickled, folder / "pytorch_model.bin")  # what timm would read with torch.load in its place
    with pytest.raises(ValueError, match="has no model.safetensors"):
        timm.create_model(f"local-dir:{folder}", pretrained=True)


def test_a_config_json_never_imports_a_solver(exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A solver named by import path in config.json (a run trained with a user's solver, or a planted file) is
    refused before anything is imported; the user builds that layer and passes it as deq=."""
    _, out, _ = exported
    marker = tmp_path / "imported"
    (tmp_path / "planted_solver.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Solver: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = tmp_path / "planted"
    shutil.copytree(out, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["deq"]["solver"] = "planted_solver:Solver"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="import path 'planted_solver:Solver'"):
        timm.create_model(f"local-dir:{folder}", pretrained=True)
    assert not marker.exists()
    layer = evaluate.load_model(exported[0])[0].deq.layer()  # the user's own layer instead: loads
    model = timm.create_model(f"local-dir:{folder}", pretrained=True, deq=layer)
    torch.testing.assert_close(_logits(model, _images()), _logits(_reference(exported[0]), _images()))
    assert not marker.exists()


def test_export_refuses_a_folder_in_use_and_a_missing_run(exported, tmp_path: Path, capsys) -> None:
    run, out, _ = exported
    before = (out / "config.json").read_text()
    assert export.main([str(run), str(out)]) == 2
    assert export.main([str(tmp_path / "nowhere"), str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "Traceback" not in "".join(err)
    assert "exists and is not an empty folder" in err[0] and "is neither a run directory" in err[1]
    assert (out / "config.json").read_text() == before and not (tmp_path / "new").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export.export_run(checkpoint_path(run, 4), empty) == empty  # a checkpoint folder, empty OUT
    assert (empty / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


@pytest.mark.parametrize("fault", EXPORT_FAULTS)
def test_a_destination_that_cannot_be_used_is_one_line(exported, tmp_path: Path, capsys, fault: str) -> None:
    """A read-only folder, a full device, a link planted at OUT.partial or a dangling link at OUT: one line, exit
    status 2, nothing of the export left behind and nothing written where a link points."""
    check_export_fault(fault, export.main, exported[0], tmp_path / "dest", lambda: capsys.readouterr().err)


def test_a_resnet_run_exports_too(tmp_path: Path) -> None:
    """The explicit twin (timm's ResNet, registered as resnet_mini) goes the same way."""
    run, out, _ = _train_and_export(tmp_path, "tiny-resnet")
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "resnet_mini" and "deq" not in config["model_args"]
    model = timm.create_model(f"local-dir:{out}", pretrained=True)
    torch.testing.assert_close(_logits(model, _images()), _logits(_reference(run), _images()), rtol=0, atol=0)
