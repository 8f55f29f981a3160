"""Models: the MDEQ and the explicit baselines (timm's ResNets), registered with timm.

Each architecture's file registers its models as timm's own files do (the class, ``default_cfgs`` and the
``@register_model`` entrypoints): ``mdeq`` (the MDEQs of the papers and ``mdeq_mini``) and ``resnet_mini``. A new
architecture is its file (:mod:`~deq_vision.models.build` says what it uses) plus one import below.

:func:`create_model` builds any of them by timm name; DEQs (:func:`is_deq_model`) take their DEQ settings as one
ready layer, ``deq=deq_core.DEQ(...)`` (the training configs build it from their ``deq`` section,
``cfg.deq.layer()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import timm
from torch import nn

import deq_core

from . import mdeq, resnet_mini  # noqa: F401  (each registers its models with timm)
from .build import is_deq_model, registered_models
from .mdeq import MDEQ, default_deq

MODEL_NAMES: tuple[str, ...] = registered_models(__name__)  # the timm names this package registers, sorted
MDEQ_SETTINGS = ("dropout",)  # a DEQ's own settings create_model passes on (besides deq and TIMM_SETTINGS)
TIMM_SETTINGS = ("drop_rate", "drop_path_rate")  # timm's regularization arguments, taken by every model


def create_model(
    name: str,
    num_classes: int,
    in_chans: int = 3,
    deq: deq_core.DEQ | None = None,
    data: Mapping[str, Any] | None = None,
    **settings: Any,
) -> nn.Module:
    """Build ``name`` through timm. For DEQs (:func:`is_deq_model`), ``deq`` is the DEQ layer (None: the
    architecture's default, its entrypoint's) and ``settings`` (``dropout``, ``drop_rate``, ``drop_path_rate``)
    override the architecture's defaults; explicit networks ignore ``deq`` and ``dropout`` and take ``drop_rate`` and
    ``drop_path_rate``. ``data``: the data the model is for, in timm's ``pretrained_cfg`` terms (``input_size``,
    ``mean``, ``std``, ...: ``deq_vision.data.data_config``), replacing the architecture's in ``model.pretrained_cfg``
    (None: the architecture's); ``num_classes`` goes there too.

    Raises:
        ValueError: unknown model name (the message lists ours and points to ``timm.list_models``), or a setting no
            model takes (e.g. ``max_iter``: solver settings belong to the ``deq`` layer).
    """
    if not timm.is_model(name):
        raise ValueError(
            f"unknown model {name!r}: use one of {list(MODEL_NAMES)} or any timm model (timm.list_models())."
        )
    unknown = set(settings) - set(MDEQ_SETTINGS) - set(TIMM_SETTINGS)
    if unknown:
        raise ValueError(
            f"unknown model settings {sorted(unknown)}; valid: {[*MDEQ_SETTINGS, *TIMM_SETTINGS]}; solver settings "
            "go in the layer: create_model(..., deq=deq_core.DEQ(max_iter=..., backward=...))."
        )
    overlay = None if data is None else {**data, "num_classes": num_classes}
    if is_deq_model(name):
        return timm.create_model(
            name, num_classes=num_classes, in_chans=in_chans, deq=deq, pretrained_cfg_overlay=overlay, **settings
        )
    timm_settings = {key: settings.get(key) for key in TIMM_SETTINGS}  # None: timm's default
    return timm.create_model(
        name, num_classes=num_classes, in_chans=in_chans, pretrained_cfg_overlay=overlay, **timm_settings
    )


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (weight-normalized weights count g and v)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "MDEQ", "MDEQ_SETTINGS", "MODEL_NAMES", "TIMM_SETTINGS", "count_parameters", "create_model", "default_deq",
    "is_deq_model",
]  # fmt: skip
