"""timm registration of the MDEQ architectures of the papers, and a small ResNet for the CPU-scale results.

After ``import deq_vision`` (timm has no plugin discovery: the models exist in timm's registry once this module is
imported): ``timm.create_model("mdeq_large_cifar10")``, ``"mdeq_tiny_cifar10"``, ``"mdeq_small_imagenet"``,
``"mdeq_large_imagenet"``, the JR paper's ImageNet variants ``"mdeq_small_imagenet_jr"`` and
``"mdeq_large_imagenet_jr"``, and the CPU-scale ``"mdeq_mini"`` and ``"resnet_mini"``. Keyword arguments (num_classes,
in_chans, dropout, drop_path_rate, ...) override the defaults below; ``deq=deq_core.DEQ(...)`` replaces the
architecture's default DEQ layer (solvers, limits, backward mode), and so does ``deq=dict(...)``, the layer's settings
as plain data (:func:`layer_settings`; what an exported run's config.json holds). Each model carries a
``pretrained_cfg`` describing the data it is for (input size, mean / std, crop, classes).

No weights are published, so ``pretrained=True`` alone is timm's error (no pretrained weights exist); with a source it
loads a trained run's weights as for any timm model: ``timm.create_model("local-dir:OUT", pretrained=True)`` (a folder
written by ``python -m deq_vision.export``), ``"hf-hub:USER/REPO"``, or
``pretrained_cfg_overlay=dict(file=".../model.safetensors")`` / ``dict(hf_hub_id=...)``. A weights file written by
deq-vision (a checkpoint's or an export's) carries the run's DEQ layer and data settings
(:mod:`~deq_vision.models.weights_config`): given only the file, the model is built with them (solvers, limits,
tolerances, input size, normalization, classes) where the keywords do not set them. ``timm.models.load_checkpoint``
(and ``create_model(..., checkpoint_path=...)``) only copies tensors into a model already built: it keeps that
model's own DEQ layer and ``pretrained_cfg``. Weights are read from
safetensors files only: a weight file of another format (a pickle, which can hold code), a folder without
``model.safetensors`` or a url (timm reads those with torch.load) is refused with a ValueError before anything is read.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model, resolve_pretrained_cfg
from timm.models.resnet import BasicBlock, ResNet

import deq_core
from deq_core.train.deq_config import DEQConfig
from deq_core.train.trust import check_import_paths

from .mdeq import MDEQ, default_deq
from .weights_config import DATA_KEYS, read_weights_config

# Architectures of the papers' configurations (branch widths, head widths, final width, stem, GroupNorm, dropout), as
# the authors' files give them (locuslab/deq, branch master, MDEQ-Vision/experiments/): cifar/cls_mdeq_TINY.yaml,
# cifar/cls_mdeq_LARGE.yaml (its JR run, cls_mdeq_LARGE_reg.yaml, changes only the dropout: a preset setting),
# imagenet/cls_mdeq_SMALL.yaml, cls_mdeq_SMALL_reg.yaml (wider head, no affine after the fusion),
# cls_mdeq_LARGE.yaml and cls_mdeq_LARGE_reg.yaml (no affine after the fusion). All: 8 GroupNorm groups, expansion 5
# (the MDEQ's defaults); DOWNSAMPLE_TIMES 0 (CIFAR) or 2 (ImageNet) strided stem convs. The class count and input
# channels come from the model's pretrained_cfg (below).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "mdeq_tiny_cifar10": dict(
        channels=(24, 24), head_channels=(8, 16), final_channels=200, stem_strides=(1, 1), dropout=0.25,
    ),
    "mdeq_large_cifar10": dict(
        channels=(32, 64, 128, 256), head_channels=(14, 28, 56, 112), final_channels=1680,
        stem_strides=(1, 1), dropout=0.3,
    ),
    "mdeq_small_imagenet": dict(
        channels=(32, 64, 128, 256), head_channels=(24, 48, 96, 192), final_channels=2048,
        stem_strides=(2, 2), dropout=0.0, post_gn_affine=True,
    ),
    "mdeq_small_imagenet_jr": dict(
        channels=(32, 64, 128, 256), head_channels=(28, 56, 112, 224), final_channels=2048,
        stem_strides=(2, 2), dropout=0.02, post_gn_affine=False,
    ),
    "mdeq_large_imagenet": dict(
        channels=(80, 160, 320, 640), head_channels=(32, 64, 128, 256), final_channels=2048,
        stem_strides=(2, 2), dropout=0.0, post_gn_affine=True,
    ),
    "mdeq_large_imagenet_jr": dict(
        channels=(80, 160, 320, 640), head_channels=(32, 64, 128, 256), final_channels=2048,
        stem_strides=(2, 2), dropout=0.0, post_gn_affine=False,
    ),
    # CPU scale (16x16 digits and glyphs): two narrow branches (16x16, 8x8).
    "mdeq_mini": dict(
        channels=(16, 32), head_channels=(8, 16), final_channels=64, stem_strides=(1, 1),
        expansion=2, num_groups=4, dropout=0.1,
    ),
}  # fmt: skip

# The limits of each architecture's default DEQ layer (deq_vision.models.mdeq.default_deq: the MDEQ paper's Broyden
# forward and implicit backward), used when no ``deq`` layer is given: the files' F_THRES + 1 calls of f forward (their
# Broyden threshold T evaluates f(z0) and takes T steps) and B_THRES backward (their first backward call, at u = 0,
# returns the incoming gradient: our starting point). The presets in deq_vision.configs build their own layer from the
# config.
DEFAULT_DEQ_LIMITS: dict[str, dict[str, Any]] = {
    "mdeq_tiny_cifar10": dict(max_iter=18 + 1, backward_max_iter=20),
    "mdeq_large_cifar10": dict(max_iter=18 + 1, backward_max_iter=20),
    "mdeq_small_imagenet": dict(max_iter=26 + 1, backward_max_iter=27, stop_mode="abs"),
    "mdeq_small_imagenet_jr": dict(max_iter=14 + 1, backward_max_iter=14, stop_mode="abs"),
    "mdeq_large_imagenet": dict(max_iter=26 + 1, backward_max_iter=27, stop_mode="abs"),
    "mdeq_large_imagenet_jr": dict(max_iter=14 + 1, backward_max_iter=14, stop_mode="abs"),
    "mdeq_mini": dict(max_iter=12, backward_max_iter=12),
}

MODEL_NAMES: tuple[str, ...] = (*ARCHITECTURES, "resnet_mini")

# The data each model is for, as deq_vision.data feeds it (data/build.py: NORMALIZATION, eval crop fraction 1 for
# the small datasets and timm's 0.875 for ImageNet, timm's bilinear resize; tests/test_timm_conventions.py checks
# that both agree): input (C, H, W), per-channel mean / std, crop fraction, classes.
_CIFAR10 = dict(
    input_size=(3, 32, 32), mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616), crop_pct=1.0, num_classes=10
)
_IMAGENET = dict(
    input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.875, num_classes=1000
)
_GLYPHS_DIGITS = dict(input_size=(1, 16, 16), mean=(0.5,), std=(0.5,), crop_pct=1.0, num_classes=10)


def _cfg(data: dict[str, Any], pool_size: tuple[int, int], description: str, **extra: Any) -> dict[str, Any]:
    """A pretrained_cfg without weights: the data's input size / normalization / crop / classes, the unpooled
    feature map's size at that input (``pool_size``), the first conv and the classifier (for timm's adaptation)."""
    layers = dict(first_conv="stem.0.0", classifier="head.classifier")
    return dict(
        **data, pool_size=pool_size, interpolation="bilinear", description=description, license="mit",
        **{**layers, **extra},
    )  # fmt: skip


default_cfgs = generate_default_cfgs(
    {
        "mdeq_tiny_cifar10": _cfg(_CIFAR10, (16, 16), "MDEQ-tiny, CIFAR-10 (MDEQ paper)"),
        "mdeq_large_cifar10": _cfg(_CIFAR10, (4, 4), "MDEQ-large, CIFAR-10 (MDEQ and JR papers)"),
        "mdeq_small_imagenet": _cfg(_IMAGENET, (7, 7), "MDEQ-small, ImageNet (MDEQ paper)"),
        "mdeq_small_imagenet_jr": _cfg(_IMAGENET, (7, 7), "MDEQ-small as trained with JR, ImageNet (JR paper)"),
        "mdeq_large_imagenet": _cfg(_IMAGENET, (7, 7), "MDEQ-large, ImageNet (MDEQ paper)"),
        "mdeq_large_imagenet_jr": _cfg(_IMAGENET, (7, 7), "MDEQ-large as trained with JR, ImageNet (JR paper)"),
        "mdeq_mini": _cfg(_GLYPHS_DIGITS, (8, 8), "CPU-scale MDEQ: 16x16 grayscale digits and glyphs"),
        "resnet_mini": _cfg(
            _GLYPHS_DIGITS, (1, 1), "CPU-scale ResNet twin: 16x16 grayscale digits and glyphs",
            first_conv="conv1", classifier="fc",
        ),
    }
)  # fmt: skip


# The DEQConfig fields that make the layer (DEQConfig.layer_settings); the rest of the ``deq`` section schedules
# training (jittered limit, pretraining, Jacobian loss) and is not part of a model.
LAYER_KEYS: tuple[str, ...] = (
    "solver", "solver_options", "max_iter", "tol", "stop_mode", "stop_over", "eval_max_iter", "eval_tol", "backward",
    "backward_solver", "backward_options", "backward_max_iter", "backward_tol", "backward_stop_mode",
    "backward_stop_over", "phantom_steps", "phantom_damping", "jacobian_samples", "on_nonfinite",
)  # fmt: skip
WEIGHTS_FILE = "model.safetensors"  # the weights of a local-dir / hf-hub folder (timm's name)


def layer_settings(deq: DEQConfig) -> dict[str, Any]:
    """The DEQ layer of a config's ``deq`` section as JSON data (``LAYER_KEYS``; tuples as lists): what
    ``deq=`` takes as a dict, and what an export writes to config.json's ``model_args``."""
    return {key: list(v) if isinstance(v := getattr(deq, key), tuple) else v for key in LAYER_KEYS}


def layer_from_settings(settings: Mapping[str, Any]) -> deq_core.DEQ:
    """The :class:`deq_core.DEQ` layer of plain settings (:func:`layer_settings`; keys left out take
    ``DEQConfig``'s defaults).

    Raises:
        ValueError: an unknown key, a bad value, or a solver that is not one of deq-core's built-ins: settings read as
            data (a config.json) never import code, so a layer with a user's solver ("package.module:Class") is
            built by the user, ``deq=deq_core.DEQ(solver=...)``.
    """
    unknown = sorted(set(settings) - set(LAYER_KEYS))
    if unknown:
        raise ValueError(f"deq: unknown layer settings {unknown}; valid: {', '.join(LAYER_KEYS)}.")
    check_import_paths(DEQConfig, settings, (), "deq.", fix="build that layer and pass deq=deq_core.DEQ(solver=...)")
    values = {key: tuple(v) if isinstance(v, list) else v for key, v in settings.items()}
    return DEQConfig(**values).layer()


def _deq_layer(name: str, deq: Any) -> deq_core.DEQ:
    """``deq`` as a layer: None the architecture's default, a dict by :func:`layer_from_settings`, a layer as is."""
    if deq is None:
        return default_deq(**DEFAULT_DEQ_LIMITS[name])
    if isinstance(deq, Mapping):
        return layer_from_settings(deq)
    return deq  # MDEQ checks that it is a deq_core.DEQ


def _weights_source(name: str, kwargs: dict[str, Any]) -> Path | None:
    """Refuse (ValueError) a pretrained source that is not a safetensors file, before timm reads it; an hf-hub
    source without a file name gets ``model.safetensors`` (timm would fall back to ``pytorch_model.bin``). No source
    at all is left to timm's own error. Returns the local weights file of a source that has no config.json beside it
    (``pretrained_cfg_overlay=dict(file=...)`` or ``dict(hf_hub_id=...)``, fetched as timm fetches it), else None."""
    overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
    cfg = resolve_pretrained_cfg(name, kwargs.get("pretrained_cfg"), overlay).to_dict()
    source = cfg.get("source") or ""
    hint = f"{name} loads weights from safetensors files only (other formats are pickles, which can run code)"
    if source == "local-dir":
        if not (Path(cfg["file"]) / WEIGHTS_FILE).is_file():
            raise ValueError(f"{cfg['file']} has no {WEIGHTS_FILE}: {hint}; write it with python -m deq_vision.export.")
    elif source != "hf-hub" and cfg.get("state_dict") is not None:
        return None  # tensors given in memory
    elif source != "hf-hub" and cfg.get("file"):
        if not str(cfg["file"]).endswith(".safetensors"):
            raise ValueError(f"pretrained file {cfg['file']}: {hint}.")
        return Path(cfg["file"])
    elif cfg.get("hf_hub_id"):
        filename = cfg.get("hf_hub_filename")
        if filename is None:
            kwargs["pretrained_cfg_overlay"] = {**overlay, "hf_hub_filename": WEIGHTS_FILE}
        elif not str(filename).endswith(".safetensors"):
            raise ValueError(f"pretrained hf_hub_filename {filename}: {hint}.")
        if source != "hf-hub":  # hf-hub:USER/REPO names come with their config.json
            from huggingface_hub import hf_hub_download

            repo, _, revision = str(cfg["hf_hub_id"]).partition("@")
            return Path(hf_hub_download(repo, filename or WEIGHTS_FILE, revision=revision or None,
                                        cache_dir=kwargs.get("cache_dir")))  # fmt: skip
    elif cfg.get("url"):
        raise ValueError(
            f"pretrained url {cfg['url']}: {hint}; download it and pass pretrained_cfg_overlay=dict(file=...)."
        )
    return None


def _apply_weights_config(name: str, kwargs: dict[str, Any], file: Path) -> None:
    """Build ``name`` as the run that wrote ``file`` (:mod:`~deq_vision.models.weights_config`): its data
    (``pretrained_cfg``, and through it ``in_chans`` and ``num_classes``) and its DEQ layer, where ``kwargs`` does not
    set them. A file that carries no settings leaves an MDEQ with its default layer, said in one warning line.

    Raises:
        ValueError: the file holds the weights of another architecture, or settings that cannot be read.
    """
    config = read_weights_config(file)
    is_deq = name in ARCHITECTURES
    if config is None:
        if is_deq and kwargs.get("deq") is None:
            warnings.warn(
                f"{file} carries no DEQ layer settings (written by an earlier deq-vision or by other code): {name} "
                "solves with its default layer; pass deq= with the settings the weights were trained with.",
                UserWarning, stacklevel=2,
            )  # fmt: skip
        return
    if config["architecture"] != name:
        raise ValueError(
            f"{file} holds the weights of {config['architecture']}, not of {name}: "
            f"timm.create_model({config['architecture']!r}, pretrained=True, pretrained_cfg_overlay=dict(file=...))."
        )
    saved = config["pretrained_cfg"]
    data = {key: tuple(v) if isinstance(v := saved[key], list) else v for key in DATA_KEYS if key in saved}
    kwargs["pretrained_cfg_overlay"] = {**data, **(kwargs.get("pretrained_cfg_overlay") or {})}
    if is_deq and kwargs.get("deq") is None and "deq" in config:
        kwargs["deq"] = config["deq"]


def _with_weights_config(name: str, pretrained: bool, kwargs: dict[str, Any]) -> None:
    """Check a pretrained source (:func:`_weights_source`) and take the settings its weights file carries."""
    if pretrained and (file := _weights_source(name, kwargs)) is not None:
        _apply_weights_config(name, kwargs, file)


def _build_mdeq(name: str, pretrained: bool, kwargs: dict[str, Any]) -> MDEQ:
    _with_weights_config(name, pretrained, kwargs)
    kwargs["deq"] = _deq_layer(name, kwargs.get("deq"))
    settings = {**ARCHITECTURES[name], **kwargs}
    # features_only=True: timm's FeatureGetterNet over forward_intermediates, one map per branch by default.
    features = dict(out_indices=tuple(range(len(settings["channels"]))), feature_cls="getter")
    return build_model_with_cfg(MDEQ, name, pretrained=pretrained, feature_cfg=features, **settings)


@register_model
def mdeq_tiny_cifar10(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-tiny for 32x32 CIFAR-10 (about 170K parameters)."""
    return _build_mdeq("mdeq_tiny_cifar10", pretrained, kwargs)


@register_model
def mdeq_large_cifar10(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-large for 32x32 CIFAR-10 (about 10M parameters)."""
    return _build_mdeq("mdeq_large_cifar10", pretrained, kwargs)


@register_model
def mdeq_small_imagenet(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-small for 224x224 ImageNet (about 18M parameters)."""
    return _build_mdeq("mdeq_small_imagenet", pretrained, kwargs)


@register_model
def mdeq_small_imagenet_jr(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-small as the JR paper trains it on 224x224 ImageNet (cls_mdeq_SMALL_reg.yaml): a wider head, dropout
    0.02, no affine after the fusion (about 19M parameters)."""
    return _build_mdeq("mdeq_small_imagenet_jr", pretrained, kwargs)


@register_model
def mdeq_large_imagenet(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-large for 224x224 ImageNet (about 63M parameters)."""
    return _build_mdeq("mdeq_large_imagenet", pretrained, kwargs)


@register_model
def mdeq_large_imagenet_jr(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-large as the JR paper trains it on 224x224 ImageNet (cls_mdeq_LARGE_reg.yaml): no affine after the
    fusion (about 63M parameters)."""
    return _build_mdeq("mdeq_large_imagenet_jr", pretrained, kwargs)


@register_model
def mdeq_mini(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """A narrow two-branch MDEQ (about 90K parameters) for CPU-scale runs on 16x16 digits and glyphs."""
    return _build_mdeq("mdeq_mini", pretrained, kwargs)


@register_model
def resnet_mini(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """timm's ResNet with one BasicBlock per stage, widths 8-64 (about 80K parameters), for CPU-scale runs."""
    _with_weights_config("resnet_mini", pretrained, kwargs)
    settings: dict[str, Any] = dict(block=BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), stem_width=8)
    return build_model_with_cfg(ResNet, "resnet_mini", pretrained=pretrained, **{**settings, **kwargs})
