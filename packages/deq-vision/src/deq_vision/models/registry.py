"""timm registration of the MDEQ architectures of the papers, and a small ResNet for the CPU-scale digits result.

After ``import deq_vision``: ``timm.create_model("mdeq_large_cifar10")``, ``"mdeq_tiny_cifar10"``,
``"mdeq_small_imagenet"``, ``"mdeq_large_imagenet"``, and the CPU-scale ``"mdeq_mini"`` and ``"resnet_mini"``. Keyword
arguments (num_classes, in_chans, dropout, max_iter, ...) override the defaults below. No pretrained weights exist.
"""

from __future__ import annotations

from typing import Any

from timm.models import register_model
from timm.models.resnet import BasicBlock, ResNet

from .mdeq import MDEQ

# Architectures of the papers' configurations (branch widths, head widths, final width, stem, GroupNorm, dropout,
# DEQ limits). Solver settings are the MDEQ paper's; the JR presets in deq_vision.configs change them per run.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "mdeq_tiny_cifar10": dict(
        channels=(24, 24), head_channels=(8, 16), final_channels=200, num_classes=10, stem_strides=(1, 1),
        dropout=0.25, max_iter=18, backward_max_iter=20,
    ),
    "mdeq_large_cifar10": dict(
        channels=(32, 64, 128, 256), head_channels=(14, 28, 56, 112), final_channels=1680, num_classes=10,
        stem_strides=(1, 1), dropout=0.3, max_iter=18, backward_max_iter=20,
    ),
    "mdeq_small_imagenet": dict(
        channels=(32, 64, 128, 256), head_channels=(24, 48, 96, 192), final_channels=2048, num_classes=1000,
        stem_strides=(2, 2), dropout=0.0, post_gn_affine=True, max_iter=26, backward_max_iter=27, stop_mode="abs",
    ),
    "mdeq_large_imagenet": dict(
        channels=(80, 160, 320, 640), head_channels=(32, 64, 128, 256), final_channels=2048, num_classes=1000,
        stem_strides=(2, 2), dropout=0.0, post_gn_affine=True, max_iter=26, backward_max_iter=27, stop_mode="abs",
    ),
    # CPU scale (e.g. 16x16 digits): two narrow branches (16x16, 8x8).
    "mdeq_mini": dict(
        channels=(16, 32), head_channels=(8, 16), final_channels=64, num_classes=10, stem_strides=(1, 1),
        expansion=2, num_groups=4, dropout=0.1, max_iter=12, backward_max_iter=12,
    ),
}  # fmt: skip

MODEL_NAMES: tuple[str, ...] = (*ARCHITECTURES, "resnet_mini")

_TIMM_ONLY = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")


def _build_mdeq(name: str, pretrained: bool, kwargs: dict[str, Any]) -> MDEQ:
    if pretrained:
        raise ValueError(f"{name} has no pretrained weights; load a deq_vision checkpoint instead.")
    for key in _TIMM_ONLY:
        kwargs.pop(key, None)
    return MDEQ(**{**ARCHITECTURES[name], **kwargs})


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
def mdeq_large_imagenet(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """MDEQ-large for 224x224 ImageNet (about 63M parameters)."""
    return _build_mdeq("mdeq_large_imagenet", pretrained, kwargs)


@register_model
def mdeq_mini(pretrained: bool = False, **kwargs: Any) -> MDEQ:
    """A narrow two-branch MDEQ (about 90K parameters) for CPU-scale runs on small images (e.g. 16x16 digits)."""
    return _build_mdeq("mdeq_mini", pretrained, kwargs)


@register_model
def resnet_mini(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """timm's ResNet with one BasicBlock per stage, widths 8-64 (about 80K parameters), for CPU-scale runs."""
    if pretrained:
        raise ValueError("resnet_mini has no pretrained weights.")
    for key in _TIMM_ONLY:
        kwargs.pop(key, None)
    settings: dict[str, Any] = dict(
        block=BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), stem_width=8, num_classes=10
    )
    return ResNet(**{**settings, **kwargs})
