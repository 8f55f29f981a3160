"""Models: the MDEQ (registered with timm) and the explicit baselines (timm's ResNets).

:func:`create_model` builds any of them by timm name; MDEQs take the DEQ settings as keyword arguments.
"""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from .mdeq import MDEQ
from .registry import ARCHITECTURES, MODEL_NAMES

DEQ_SETTINGS = (
    "solver", "max_iter", "tol", "stop_mode", "backward_solver", "backward_max_iter", "backward_tol",
    "eval_max_iter", "eval_tol", "dropout", "solver_options", "backward_options",
)  # fmt: skip
TIMM_SETTINGS = ("drop_rate", "drop_path_rate")  # timm's regularization arguments, taken by every model


def is_deq_model(name: str) -> bool:
    """Whether the timm name is one of our MDEQs (else an explicit network)."""
    return name in ARCHITECTURES


def create_model(name: str, num_classes: int, in_chans: int = 3, **settings: Any) -> nn.Module:
    """Build ``name`` through timm. For MDEQs, ``settings`` (keys in DEQ_SETTINGS, ``drop_rate``, ``drop_path_rate``)
    override the architecture's defaults; for explicit networks they are ignored except ``drop_rate`` and
    ``drop_path_rate``.

    Raises:
        ValueError: unknown model name (the message lists ours and points to ``timm.list_models``).
    """
    if not timm.is_model(name):
        raise ValueError(
            f"unknown model {name!r}: use one of {list(MODEL_NAMES)} or any timm model (timm.list_models())."
        )
    if is_deq_model(name):
        unknown = set(settings) - set(DEQ_SETTINGS) - set(TIMM_SETTINGS)
        if unknown:
            raise ValueError(f"unknown MDEQ settings {sorted(unknown)}; valid: {[*DEQ_SETTINGS, *TIMM_SETTINGS]}.")
        return timm.create_model(name, num_classes=num_classes, in_chans=in_chans, **settings)
    timm_settings = {key: settings.get(key) for key in TIMM_SETTINGS}  # None: timm's default
    return timm.create_model(name, num_classes=num_classes, in_chans=in_chans, **timm_settings)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (weight-normalized weights count g and v)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "ARCHITECTURES", "DEQ_SETTINGS", "MDEQ", "MODEL_NAMES", "TIMM_SETTINGS", "count_parameters", "create_model",
    "is_deq_model",
]  # fmt: skip
