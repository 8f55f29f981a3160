"""timm conventions of the registered models (the MDEQs and the ResNet twin): discovery by name, pretrained_cfg for
the data each model is for, forward_features / forward_head, drop_path_rate, group_matcher (layer-wise lr decay),
get_classifier / reset_classifier, forward_intermediates / features_only, set_grad_checkpointing, no_weight_decay.
Loading trained weights through timm: tests/test_timm_weights.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config
from timm.models import group_parameters
from timm.optim import create_optimizer_v2, param_groups_layer_decay

import deq_vision
from deq_vision.configs import PRESETS
from deq_vision.data import NORMALIZATION, build_transform
from deq_vision.models import MODEL_NAMES, create_model, default_deq

PACKAGE = Path(__file__).resolve().parents[1]
SMALL = ("mdeq_mini", "mdeq_tiny_cifar10", "resnet_mini")  # cheap enough to run a forward pass in a test
# The presets that run a model on the data it is registered for: all but the tiny-* test presets, which feed
# mdeq_mini / resnet_mini a 16x16 CIFAR-format folder.
DATA_PRESETS = sorted(n for n, cfg in PRESETS.items() if cfg.model.name in MODEL_NAMES and not n.startswith("tiny"))


def _eval_input(name: str, batch: int = 3, seed: int = 0) -> torch.Tensor:
    """A batch at the model's pretrained_cfg input size (C, H, W)."""
    shape = timm.get_pretrained_cfg(name).input_size
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(seed))


def test_timm_has_no_plugin_discovery_and_import_deq_vision_registers_the_models() -> None:
    """A fresh interpreter: timm (no entry-point discovery) does not know the names until ``import deq_vision``,
    after which ``timm.create_model`` builds them with their pretrained_cfg."""
    code = textwrap.dedent(
        """
        import sys, timm
        assert "deq_vision" not in sys.modules
        print("before", timm.is_model("mdeq_mini"))
        try:
            timm.create_model("mdeq_mini")
        except RuntimeError as err:
            print("error", err)
        import deq_vision
        model = timm.create_model("mdeq_mini")
        print("after", type(model).__name__, model.pretrained_cfg["input_size"], sorted(timm.list_models("mdeq_*")))
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "before False"
    assert lines[1] == "error Unknown model (mdeq_mini)"
    names = sorted(n for n in MODEL_NAMES if n.startswith("mdeq_"))
    assert lines[2] == f"after MDEQ (1, 16, 16) {names}"
    # No entry point is declared: timm would not read it (see the timm section of docs/deq-vision.md).
    assert "entry-points" not in (PACKAGE / "pyproject.toml").read_text()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_pretrained_cfg_has_no_weights_and_pretrained_true_is_timms_error(name: str) -> None:
    """No weights are published: pretrained=True without a source is timm's own error (a trained run's weights load
    with a source, tests/test_timm_weights.py)."""
    cfg = timm.get_pretrained_cfg(name)
    assert not cfg.has_weights and cfg.architecture == name
    assert cfg.num_classes in (10, 1000) and cfg.classifier and cfg.first_conv
    assert not timm.is_model_pretrained(name)
    with pytest.raises(RuntimeError, match=f"No pretrained weights exist for {name}. Use `pretrained=False`"):
        timm.create_model(name, pretrained=True)


@pytest.mark.parametrize("preset", DATA_PRESETS)
def test_pretrained_cfg_matches_the_data_pipeline_of_the_presets(preset: str) -> None:
    """timm's eval transform from the pretrained_cfg equals deq_vision's for the preset's data (size, crop, mean,
    std, channels), and the head has the dataset's classes."""
    cfg = PRESETS[preset]
    data = resolve_data_config(pretrained_cfg=timm.get_pretrained_cfg(cfg.model.name).to_dict())
    assert data["input_size"] == (cfg.in_chans, cfg.data.image_size, cfg.data.image_size)
    assert (data["mean"], data["std"]) == NORMALIZATION[cfg.data.dataset]
    assert timm.get_pretrained_cfg(cfg.model.name).num_classes == cfg.head_classes
    rng = np.random.default_rng(0)
    side = (cfg.data.image_size * 5) // 4 + 3  # not the input size: resize and crop do work
    pixels = rng.integers(0, 256, (side, side + 7, 3) if cfg.in_chans == 3 else (side, side + 7), dtype=np.uint8)
    image = Image.fromarray(pixels)
    theirs = create_transform(**data, is_training=False)(image)
    ours = build_transform(cfg, training=False)(image)
    assert theirs.shape == ours.shape == (cfg.in_chans, cfg.data.image_size, cfg.data.image_size)
    torch.testing.assert_close(theirs, ours, rtol=0, atol=0)


@pytest.mark.parametrize("name", SMALL)
def test_forward_is_forward_head_of_forward_features(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    cfg = model.pretrained_cfg
    x = _eval_input(name)
    with torch.no_grad():
        logits = model(x)
        features = model.forward_features(x)
        pre_logits = model.forward_head(features, pre_logits=True)
        assert features.shape == (3, model.num_features, *cfg["pool_size"])  # unpooled
        assert pre_logits.shape == (3, model.num_features)
        assert logits.shape == (3, cfg["num_classes"])
        torch.testing.assert_close(model.forward_head(features), logits, rtol=0, atol=0)
        torch.testing.assert_close(model.get_classifier()(pre_logits), logits, rtol=0, atol=0)


def test_feature_shapes_of_the_large_cifar_model() -> None:
    """The shape stated in MDEQ.forward_features' docstring for mdeq_large_cifar10 at 32x32."""
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(max_iter=2)).eval()
    with torch.no_grad():
        assert model.forward_features(torch.randn(1, 3, 32, 32)).shape == (1, 1680, 4, 4)


def _layer_scales(model: torch.nn.Module, groups: list[dict]) -> dict[str, float]:
    """Parameter name -> lr_scale of its group."""
    by_id = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    return {n: by_id[id(p)] for n, p in model.named_parameters()}


def test_layer_decay_groups_follow_the_mdeq_from_input_to_output() -> None:
    model = timm.create_model("mdeq_mini")
    scales = _layer_scales(model, param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.7))
    # stem conv 0, stem conv 1, branch blocks, fusion, bottleneck 0, downsample 0, bottleneck 1, final, classifier
    fine = sorted(0.7**k for k in range(9))
    assert sorted(set(scales.values())) == pytest.approx(fine)
    first = {part: min(s for n, s in scales.items() if n.startswith(part)) for part in ("stem", "blocks", "fusion")}
    assert first["stem"] < first["blocks"] < first["fusion"] < scales["head.final.0.weight"]
    assert scales["head.increase.0.body.0.weight"] < scales["head.downsample.0.0.weight"]
    assert scales["head.downsample.0.0.weight"] < scales["head.increase.1.body.0.weight"]
    # Only the classifier is left to timm's last group: every other parameter is matched.
    assert [n for n, s in scales.items() if s == 1.0] == ["head.classifier.weight", "head.classifier.bias"]

    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.7)
    assert sorted({g["lr_scale"] for g in optimizer.param_groups}) == pytest.approx(fine)

    coarse = group_parameters(model, model.group_matcher(coarse=True), reverse=True)
    assert {coarse[n] for n in ("stem.0.0.weight", "stem.1.0.weight")} == {0}
    assert {coarse[n] for n in scales if n.startswith(("blocks.", "fusion."))} == {1}
    assert {coarse[n] for n in scales if n.startswith("head.") and "classifier" not in n} == {2}
    assert coarse["head.classifier.weight"] == 3


def test_layer_decay_groups_of_the_resnet_twin() -> None:
    model = timm.create_model("resnet_mini")
    scales = _layer_scales(model, param_groups_layer_decay(model, layer_decay=0.7))
    assert len(set(scales.values())) == 6  # stem, four one-block stages, fc
    assert scales["conv1.weight"] < scales["layer1.0.conv1.weight"] < scales["layer4.0.conv1.weight"]
    assert scales["fc.weight"] == 1.0


@pytest.mark.parametrize("name", ["mdeq_mini", "resnet_mini"])
def test_drop_path_changes_outputs_in_train_mode_only(name: str) -> None:
    """The same weights with drop_path_rate 0 and 0.5 (through deq_vision.models.create_model, as training builds
    models): equal in eval mode; in train mode rate 0 draws nothing and rate 0.5 changes the output."""
    torch.manual_seed(0)
    extra = {"dropout": 0.0} if name == "mdeq_mini" else {}
    plain = create_model(name, num_classes=10, in_chans=1, **extra)
    dropped = create_model(name, num_classes=10, in_chans=1, drop_path_rate=0.5, **extra)
    with torch.no_grad():
        for pname, p in plain.named_parameters():
            if pname.endswith("bn2.weight"):  # timm zero-inits the ResNet branches' last BN: nothing to drop
                p.fill_(1.0)
    dropped.load_state_dict(plain.state_dict())
    x = _eval_input(name, batch=8)

    def run(model: torch.nn.Module, seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.no_grad():
            return model(x)

    plain.eval(), dropped.eval()
    torch.testing.assert_close(run(dropped, 1), run(plain, 2), rtol=0, atol=0)
    plain.train(), dropped.train()  # (BatchNorm in train mode: batch statistics, the same for both)
    torch.testing.assert_close(run(plain, 1), run(plain, 2), rtol=0, atol=0)  # rate 0: no randomness
    assert not torch.allclose(run(dropped, 1), run(plain, 1))
    assert not torch.allclose(run(dropped, 1), run(dropped, 2))


def test_drop_path_draws_one_mask_per_sample_for_the_whole_solve() -> None:
    torch.manual_seed(0)
    model = timm.create_model("mdeq_mini", drop_path_rate=0.5, dropout=0.0, deq=default_deq(4, 4)).train()
    logits, info = model(_eval_input("mdeq_mini", batch=16), return_info=True)
    assert info.nfe >= 2  # several solver iterations, one mask
    for block in model.blocks:
        mask = block.drop_path.mask
        assert mask is not None and mask.shape == (16, 1, 1, 1)
        assert set(mask.flatten().tolist()) == {0.0, 2.0}  # 16 draws at p = 0.5: both outcomes (seeded)
    logits.logsumexp(1).sum().backward()
    grad = model.blocks[0].conv1.parametrizations.weight.original1.grad
    assert grad is not None and torch.isfinite(grad).all()
    with pytest.raises(ValueError, match="drop_path_rate must be in"):
        timm.create_model("mdeq_mini", drop_path_rate=1.0)


@pytest.mark.parametrize("name", ["mdeq_mini", "resnet_mini"])
def test_reset_classifier_changes_the_head(name: str) -> None:
    model = timm.create_model(name).eval()
    x = _eval_input(name)
    assert model.get_classifier().out_features == 10
    model.reset_classifier(5)
    assert model.num_classes == 5 and model.get_classifier().out_features == 5
    with torch.no_grad():
        assert model(x).shape == (3, 5)
    model.reset_classifier(0)
    assert isinstance(model.get_classifier(), torch.nn.Identity)
    with torch.no_grad():
        assert model(x).shape == (3, model.num_features)


def test_reset_classifier_rejects_other_pooling() -> None:
    with pytest.raises(ValueError, match="global_pool must be 'avg'"):
        timm.create_model("mdeq_mini").reset_classifier(3, global_pool="max")


@pytest.mark.parametrize("name", ["mdeq_mini", "mdeq_tiny_cifar10"])
def test_forward_intermediates_are_the_branch_states(name: str) -> None:
    """One map per branch, the equilibrium state z*_i at 1 / 2^i of the stem's resolution (feature_info), and the
    final map equal to forward_features; int indices take the last n, negative ones count from the end."""
    torch.manual_seed(0)
    model = timm.create_model(name, deq=default_deq(max_iter=4)).eval()
    x = _eval_input(name)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x), rtol=0, atol=0)
        z, _ = model.equilibrium(x)
        only = model.forward_intermediates(x, indices=1, intermediates_only=True)
        picked = model.forward_intermediates(x, indices=[-2], intermediates_only=True)
    side = x.shape[-1]
    assert [m.shape for m in maps] == [(3, c, side >> i, side >> i) for i, c in enumerate(model.channels)]
    assert [info["num_chs"] for info in model.feature_info] == list(model.channels)
    assert [info["reduction"] for info in model.feature_info] == [2**i for i in range(len(model.channels))]
    for got, want in zip(maps, z):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert len(only) == 1 and torch.equal(only[0], maps[-1]) and torch.equal(picked[0], maps[-2])
    with pytest.raises(ValueError, match="out of range"):
        model.forward_intermediates(x, indices=[len(model.channels)])
    with pytest.raises(ValueError, match="NCHW"):
        model.forward_intermediates(x, output_fmt="NHWC")


def test_features_only_gives_the_branch_maps_without_the_head() -> None:
    """timm.create_model(..., features_only=True): timm's FeatureGetterNet over forward_intermediates, every branch
    by default (out_indices picks), feature_info as timm's, no head parameters left (all are trained by a loss on the
    maps); the ImageNet models report their stem's stride 4."""
    torch.manual_seed(0)
    full = timm.create_model("mdeq_mini").eval()
    backbone = timm.create_model("mdeq_mini", features_only=True).eval()
    assert backbone.feature_info.channels() == [16, 32] and backbone.feature_info.reduction() == [1, 2]
    assert not any(name.startswith("model.head.") for name, _ in backbone.named_parameters())
    backbone.model.load_state_dict(full.state_dict(), strict=False)  # the same weights as the full model
    x = _eval_input("mdeq_mini")
    with torch.no_grad():
        maps = backbone(x)
        _, expected = full.forward_intermediates(x)
    for got, want in zip(maps, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    backbone.train()
    sum(m.square().mean() for m in backbone(x)).backward()  # gradients through the implicit backward
    assert all(p.grad is not None for p in backbone.parameters())
    last = timm.create_model("mdeq_mini", features_only=True, out_indices=(1,))
    assert last.feature_info.channels() == [32] and len(last(x)) == 1
    with pytest.raises(RuntimeError, match="head was pruned"):
        backbone.model.forward_features(x)
    large = timm.create_model("mdeq_small_imagenet", features_only=True, deq=default_deq(max_iter=2))
    assert large.feature_info.reduction() == [4, 8, 16, 32] and large.feature_info.channels() == [32, 64, 128, 256]


def test_grad_checkpointing_is_refused_in_one_line() -> None:
    model = timm.create_model("mdeq_mini")
    model.set_grad_checkpointing(False)  # nothing to switch off
    with pytest.raises(NotImplementedError, match="implicit backward keeps no activations") as err:
        model.set_grad_checkpointing()
    assert "\n" not in str(err.value)


def test_no_weight_decay_leaves_timms_rule() -> None:
    """no_weight_decay() names nothing: timm's optimizer factory exempts the 1-D parameters (biases, norm affines)
    and decays every conv and linear weight, the weight-norm magnitudes g included (the optimizer of the presets is
    unchanged)."""
    model = timm.create_model("mdeq_mini")
    assert model.no_weight_decay() == set()
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert names == {n for n, p in model.named_parameters() if p.ndim > 1}
    assert "blocks.0.conv1.parametrizations.weight.original0" in names


def test_package_version_matches_pyproject() -> None:
    assert f'version = "{deq_vision.__version__}"' in (PACKAGE / "pyproject.toml").read_text()
