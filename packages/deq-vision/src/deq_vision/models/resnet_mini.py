"""``resnet_mini``: timm's ResNet with one BasicBlock per stage, the explicit twin of ``mdeq_mini`` for the CPU-scale
results (16x16 grayscale digits and glyphs), registered with timm as timm registers its own ResNets."""

from __future__ import annotations

from typing import Any

from timm.models import generate_default_cfgs, register_model
from timm.models.resnet import BasicBlock, ResNet

from .build import GLYPHS_DIGITS_DATA, build_model, pretrained_cfg

default_cfgs = generate_default_cfgs(
    {
        "resnet_mini": pretrained_cfg(
            GLYPHS_DIGITS_DATA, (1, 1), "CPU-scale ResNet twin: 16x16 grayscale digits and glyphs",
            first_conv="conv1", classifier="fc",
        ),
    }
)  # fmt: skip


@register_model
def resnet_mini(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """timm's ResNet with one BasicBlock per stage, widths 8-64 (about 80K parameters), for CPU-scale runs."""
    model_args: dict[str, Any] = dict(block=BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), stem_width=8)
    return build_model(ResNet, "resnet_mini", pretrained, **dict(model_args, **kwargs))
