"""A trained run's DEQ layer (solvers, limits, tolerances) and data settings travel with its weights: through every
way timm loads them, the model solves as the run did and gives evaluate's logits and accuracy; the one way that cannot
carry them (``load_checkpoint``, which copies tensors into a model already built) keeps the model's own layer. A
model's ``pretrained_cfg`` describes the data of its weights."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader

from conftest import learnable_images, offline_hub
from deq_core.train.checkpoints import checkpoint_path
from deq_vision import evaluate, export, train
from deq_vision.data import build_datasets, write_cifar_folder
from deq_vision.models.weights_config import CONFIG_KEY
from deq_vision.train import evaluate_loader, finish_eval

STEPS = 4


@pytest.fixture(scope="module")
def run_and_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(run, export folder, CIFAR-format data folder) of a tiny-mdeq run: 3-channel 16x16 images, Broyden limited to
    6 calls of f where the registered mdeq_mini's default layer allows 12 (so the two solve differently)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("settings")
    write_cifar_folder(root / "cifar", *learnable_images(96))
    run, out = root / "run", root / "out"
    args = ["--config", "tiny-mdeq", f"steps={STEPS}", f"save_every={STEPS}", "--data-dir", str(root / "cifar")]
    assert train.main([*args, "--output-dir", str(run)]) == 0
    assert export.main([str(run), str(out)]) == 0
    return run, out, root / "cifar"


@pytest.fixture(scope="module")
def evaluated(run_and_export: tuple[Path, Path, Path]) -> str:
    """The line python -m deq_vision.evaluate prints for the run: loss, accuracies, NFE, residual."""
    run, _, cifar = run_and_export
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert evaluate.main(["--checkpoint", str(run), "--data-dir", str(cifar), "--no-sweep"]) == 0
    return printed.getvalue().strip().splitlines()[-1]


# Every way timm builds a model from the run's weights, given nothing but where they are.
LOADERS: dict[str, Callable[[Path, Path, Path], torch.nn.Module]] = {
    "checkpoint file": lambda run, out, hub: timm.create_model(
        "mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(file=str(checkpoint_path(run, STEPS)
                                                                          / "model.safetensors"))),
    "export file": lambda run, out, hub: timm.create_model(
        "mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(file=str(out / "model.safetensors"))),
    "local-dir": lambda run, out, hub: timm.create_model(f"local-dir:{out}", pretrained=True),
    "hf-hub name": lambda run, out, hub: timm.create_model("hf-hub:me/mdeq-tiny", pretrained=True, cache_dir=hub),
    "hf_hub_id overlay": lambda run, out, hub: timm.create_model(
        "mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(hf_hub_id="me/mdeq-tiny"), cache_dir=hub),
}  # fmt: skip


def _accuracy(model: torch.nn.Module, eval_set) -> dict[str, float]:
    return finish_eval(evaluate_loader(model, DataLoader(eval_set, batch_size=128), torch.device("cpu")))


@pytest.mark.parametrize("way", LOADERS)
def test_every_timm_source_solves_as_the_run_did(run_and_export, evaluated, tmp_path, monkeypatch, way) -> None:
    run, out, cifar = run_and_export
    hub = offline_hub(tmp_path / "hub", out, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "carries no DEQ layer settings", no channel mismatch
        model = LOADERS[way](run, out, hub).eval()
    cfg, reference, _ = evaluate.load_model(run)
    assert _layer(model) == _layer(reference) and model.deq.max_iter == 6
    assert model.pretrained_cfg["input_size"] == (3, 16, 16) and model.pretrained_cfg["num_classes"] == 10
    assert tuple(model.pretrained_cfg["mean"]) == (0.4914, 0.4822, 0.4465)
    x = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)
    _, eval_set = build_datasets(cfg, cifar)
    ours = _accuracy(model, eval_set)
    assert evaluated == f"eval ({len(eval_set)} images): " + ", ".join(f"{k} {v:.4g}" for k, v in ours.items())


def _layer(model: torch.nn.Module) -> tuple:
    """The DEQ layer's settings: solvers with their options, limits, tolerances, stop rules, backward, eval limits."""
    deq = model.deq
    return repr(deq), deq.eval_max_iter, deq.eval_tol, deq.jacobian_samples, deq.on_nonfinite


def test_the_registrys_default_layer_solves_otherwise(run_and_export) -> None:
    """What the weights alone gave before they carried the run's settings: the architecture's default layer (12 calls
    of f, not the run's 6), and other logits. ``load_checkpoint`` copies tensors only, so it still gives this."""
    run, _, _ = run_and_export
    weights = checkpoint_path(run, STEPS) / "model.safetensors"
    model = timm.create_model("mdeq_mini", in_chans=3, checkpoint_path=str(weights)).eval()
    also = timm.create_model("mdeq_mini", in_chans=3).eval()
    timm.models.load_checkpoint(also, str(weights))
    reference = evaluate.load_model(run)[1]
    assert model.deq.max_iter == also.deq.max_iter == 12 and reference.deq.max_iter == 6
    x = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), also(x), rtol=0, atol=0)
        assert not torch.allclose(model(x), reference(x))


def test_keywords_win_over_what_the_file_carries(run_and_export) -> None:
    run, out, _ = run_and_export
    overlay = dict(file=str(out / "model.safetensors"), crop_pct=0.5)
    model = timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=overlay, deq=dict(max_iter=3))
    assert model.deq.max_iter == 3 and model.deq.solver.__class__.__name__ == "Anderson"  # DEQConfig's defaults
    assert model.pretrained_cfg["crop_pct"] == 0.5 and model.pretrained_cfg["input_size"] == (3, 16, 16)


def test_a_file_without_settings_warns_in_one_line(run_and_export, tmp_path: Path) -> None:
    _, out, _ = run_and_export
    bare = tmp_path / "bare.safetensors"
    save_file(load_file(str(out / "model.safetensors")), str(bare))  # the tensors, no header entry
    with pytest.warns(UserWarning, match=r"carries no DEQ layer settings") as caught:
        model = timm.create_model("mdeq_mini", pretrained=True, in_chans=3, pretrained_cfg_overlay=dict(file=str(bare)))
    assert len(str(caught[0].message).splitlines()) == 1 and model.deq.max_iter == 12


def test_weights_of_another_architecture_or_a_changed_entry_are_one_line(run_and_export, tmp_path: Path) -> None:
    _, out, _ = run_and_export
    with pytest.raises(ValueError, match="holds the weights of mdeq_mini, not of mdeq_tiny_cifar10") as caught:
        timm.create_model(
            "mdeq_tiny_cifar10", pretrained=True, pretrained_cfg_overlay=dict(file=str(out / "model.safetensors"))
        )
    assert len(str(caught.value).splitlines()) == 1
    changed = tmp_path / "changed.safetensors"
    save_file(load_file(str(out / "model.safetensors")), str(changed), metadata={CONFIG_KEY: "{not json"})
    with pytest.raises(ValueError, match="is not the settings deq-vision writes"):
        timm.create_model("mdeq_mini", pretrained=True, pretrained_cfg_overlay=dict(file=str(changed)))


def test_the_checkpoint_and_the_export_carry_the_same_settings(run_and_export) -> None:
    run, out, _ = run_and_export
    headers = []
    for file in (checkpoint_path(run, STEPS) / "model.safetensors", out / "model.safetensors"):
        with safe_open(str(file), "pt") as weights:
            headers.append(json.loads(weights.metadata()[CONFIG_KEY]))
    assert headers[0] == headers[1]
    config = json.loads((out / "config.json").read_text())
    assert headers[0]["deq"] == config["model_args"]["deq"] and headers[0]["architecture"] == config["architecture"]
    assert all(headers[0]["pretrained_cfg"][k] == v for k, v in config["pretrained_cfg"].items()
               if k in headers[0]["pretrained_cfg"])  # fmt: skip


def test_evaluates_model_describes_the_data_of_its_weights(run_and_export) -> None:
    """A 3-channel CIFAR run of mdeq_mini (registered for 1-channel digits): load_model's pretrained_cfg says 3
    channels, CIFAR's mean / std and the run's classes, as the export's config.json does."""
    run, out, _ = run_and_export
    model = evaluate.load_model(run)[1]
    exported = json.loads((out / "config.json").read_text())["pretrained_cfg"]
    assert model.stem[0][0].in_channels == model.pretrained_cfg["input_size"][0] == 3
    for key in ("input_size", "mean", "std", "crop_pct", "crop_mode", "interpolation", "num_classes"):
        value = model.pretrained_cfg[key]
        assert (list(value) if isinstance(value, tuple) else value) == exported[key], key
    assert model.pretrained_cfg["num_classes"] == model.num_classes == 10
