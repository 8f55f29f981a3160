"""What a deq-vision architecture file uses to register its models with timm, as timm's own model files do: the file
holds the class, its ``default_cfgs`` (:func:`pretrained_cfg` of the data each model is for) and its
``@register_model`` entrypoints, which build through :func:`build_model`. A new architecture is its file plus one
import in ``deq_vision/models/__init__.py``. A DEQ architecture's entrypoints take the layer as ``deq=``
(:data:`~.deq_layer.LayerSpec`); that is what makes it a DEQ (:func:`is_deq_model`).

Loading weights: no weights are published, so ``pretrained=True`` alone is timm's error; with a source a model loads
a trained run's weights as any timm model does: ``timm.create_model("local-dir:OUT", pretrained=True)`` (a folder
written by ``python -m deq_vision.export``), ``"hf-hub:USER/REPO"``, or
``pretrained_cfg_overlay=dict(file=".../model.safetensors")`` / ``dict(hf_hub_id=...)``. A weights file written by
deq-vision (a checkpoint's or an export's) carries the run's DEQ layer and data settings (:mod:`~.weights_config`):
given only the file, the model is built with them (solvers, limits, tolerances, input size, normalization, classes)
where the keywords do not set them. ``timm.models.load_checkpoint`` (and ``create_model(..., checkpoint_path=...)``)
only copies tensors into a model already built: it keeps that model's own DEQ layer and ``pretrained_cfg``. Weights
are read from safetensors files only: a weight file of another format (a pickle, which can hold code), a folder
without ``model.safetensors`` or a url (timm reads those with torch.load) is refused with a ValueError before anything
is read.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import timm
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, model_entrypoint, resolve_pretrained_cfg
from torch import nn

import deq_core

from .deq_layer import deq_layer
from .weights_config import DATA_KEYS, read_weights_config

__all__ = [
    "CIFAR10_DATA", "GLYPHS_DIGITS_DATA", "IMAGENET_DATA", "WEIGHTS_FILE", "build_model", "is_deq_model",
    "pretrained_cfg", "registered_models",
]  # fmt: skip

M = TypeVar("M", bound=nn.Module)

WEIGHTS_FILE = "model.safetensors"  # the weights of a local-dir / hf-hub folder (timm's name)

# The data each model is for, as deq_vision.data feeds it (data/build.py: NORMALIZATION, eval crop fraction 1 for
# the small datasets and timm's 0.875 for ImageNet, timm's bilinear resize; tests/test_timm_conventions.py checks
# that both agree): input (C, H, W), per-channel mean / std, crop fraction, classes.
CIFAR10_DATA: Mapping[str, Any] = MappingProxyType(dict(
    input_size=(3, 32, 32), mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616), crop_pct=1.0, num_classes=10
))  # fmt: skip
IMAGENET_DATA: Mapping[str, Any] = MappingProxyType(dict(
    input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.875, num_classes=1000
))  # fmt: skip
GLYPHS_DIGITS_DATA: Mapping[str, Any] = MappingProxyType(dict(
    input_size=(1, 16, 16), mean=(0.5,), std=(0.5,), crop_pct=1.0, num_classes=10
))  # fmt: skip


def pretrained_cfg(
    data: Mapping[str, Any], pool_size: tuple[int, int], description: str, first_conv: str, classifier: str
) -> dict[str, Any]:
    """An entry of a file's ``default_cfgs`` (timm's ``pretrained_cfg``), without weights: the data's input size,
    normalization, crop and classes (e.g. :data:`CIFAR10_DATA`), the unpooled feature map's size at that input
    (``pool_size``, in pixels), one line of description, and the module names of the first conv and the classifier
    (for timm's adaptation of ``in_chans`` and ``num_classes``)."""
    return dict(
        **data, pool_size=pool_size, interpolation="bilinear", description=description, license="mit",
        first_conv=first_conv, classifier=classifier,
    )  # fmt: skip


def is_deq_model(model: str | nn.Module) -> bool:
    """Whether ``model`` is a DEQ: a timm name (or a model timm built, named by its ``pretrained_cfg``'s
    ``architecture``) whose registered entrypoint takes the DEQ layer, ``deq=``. Such a model also takes
    ``dropout`` and answers ``model(x, return_info=True)`` with the logits and a ``deq_core.DEQInfo``. False for a
    name timm does not know and for a module timm did not build."""
    name = model if isinstance(model, str) else getattr(model, "pretrained_cfg", {}).get("architecture")
    if not (isinstance(name, str) and timm.is_model(name)):
        return False
    return "deq" in inspect.signature(model_entrypoint(name)).parameters


def registered_models(package: str) -> tuple[str, ...]:
    """The timm names whose entrypoints the modules of ``package`` (e.g. ``"deq_vision.models"``) define, sorted as
    ``timm.list_models`` sorts."""
    return tuple(name for name in timm.list_models() if model_entrypoint(name).__module__.startswith(f"{package}."))


def build_model(
    model_cls: Callable[..., M], variant: str, pretrained: bool, default_deq: deq_core.DEQ | None = None, **kwargs: Any
) -> M:
    """timm's ``build_model_with_cfg(model_cls, variant, pretrained, **kwargs)`` for an entrypoint of a deq-vision
    architecture file. With ``pretrained``, the source is checked (safetensors only) and a weights file deq-vision
    wrote gives the model its run's data (``pretrained_cfg``, and through it ``in_chans`` and ``num_classes``) and,
    for a DEQ (:func:`is_deq_model`), its layer, where ``kwargs`` does not set them. A DEQ's ``deq`` keyword
    (:data:`~.deq_layer.LayerSpec`) then becomes a layer: ``default_deq`` (the architecture's) when none is given.

    Raises:
        ValueError: a source that is not a safetensors file (before anything is read), a weights file of another
            architecture, settings that cannot be read, or bad layer settings.
    """
    is_deq = is_deq_model(variant)
    if pretrained and (file := _weights_source(variant, kwargs)) is not None:
        _apply_weights_config(variant, kwargs, file, is_deq)
    if is_deq:
        kwargs["deq"] = deq_layer(kwargs.get("deq"), default_deq)
    return build_model_with_cfg(model_cls, variant, pretrained, **kwargs)


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


def _apply_weights_config(name: str, kwargs: dict[str, Any], file: Path, is_deq: bool) -> None:
    """Build ``name`` as the run that wrote ``file`` (:mod:`~.weights_config`): its data (``pretrained_cfg``, and
    through it ``in_chans`` and ``num_classes``) and, for a DEQ, its layer, where ``kwargs`` does not set them. A file
    that carries no settings leaves a DEQ with its default layer, said in one warning line.

    Raises:
        ValueError: the file holds the weights of another architecture, or settings that cannot be read.
    """
    config = read_weights_config(file)
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
