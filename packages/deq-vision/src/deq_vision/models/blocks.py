"""The pieces of the MDEQ cell f(z; x) and of its classification head, as the authors' code builds them (locuslab/deq,
branch master, MDEQ-Vision/lib/models/mdeq_core.py and mdeq.py).

Shapes: branch i holds a feature map (B, C_i, H / 2^i, W / 2^i), where (H, W) is the stem's output size.

Weight normalization (w = g v / ||v||, per output channel) is on the convolutions the authors normalize: the two of
each branch block and the 1x1 conv after the fusion. The fusion's up- and downsampling convolutions, the stem, the
injection's 1x1 conv and the head keep a plain weight.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

import deq_core


def plain_conv(c_in: int, c_out: int, kernel: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    """A convolution with "same" padding (``kernel // 2``), without weight normalization."""
    return nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=bias)


def wn_conv(c_in: int, c_out: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    """A bias-free convolution with "same" padding and weight normalization (w = g v / ||v||)."""
    conv = plain_conv(c_in, c_out, kernel, stride)
    deq_core.weight_norm(conv)
    return conv


class BranchBlock(nn.Module):
    """The residual block of one branch:
    conv3x3 -> GN -> ReLU -> conv3x3 -> variational dropout -> drop path -> + injection -> GN -> + input -> ReLU
    -> GN. The three GroupNorms are affine and the two convs weight-normalized.

    Args:
        channels: C of the branch. expansion: the inner width is C * expansion. groups: GroupNorm groups.
        dropout: variational dropout probability: one mask value per sample and channel, shared by every pixel and by
            all solver iterations of a forward pass (a dropped channel is zero everywhere in the map).
        drop_path: stochastic depth probability: in training, the residual branch (the two convs) of a sample is
            zeroed with this probability and kept ones are scaled by 1 / (1 - p). One draw per sample per forward
            pass, shared by every solver iteration (so f stays one map during a solve); identity in eval mode or at 0.
    """

    def __init__(self, channels: int, expansion: int, groups: int, dropout: float, drop_path: float = 0.0) -> None:
        super().__init__()
        inner = channels * expansion
        self.conv1 = wn_conv(channels, inner, 3)
        self.gn1 = nn.GroupNorm(groups, inner)
        self.conv2 = wn_conv(inner, channels, 3)
        self.drop = deq_core.VariationalDropout(dropout, shared_dims=(2, 3))
        self.drop_path = deq_core.VariationalDropout(drop_path, shared_dims=(1, 2, 3))
        self.gn2 = nn.GroupNorm(groups, channels)
        self.gn3 = nn.GroupNorm(groups, channels)

    def reset_masks(self, like: Tensor) -> None:
        """Draw the dropout and drop-path masks for states shaped like ``like`` (B, C, h, w), once per forward pass:
        (B, C, 1, 1) and (B, 1, 1, 1)."""
        self.drop.reset_mask(like)
        self.drop_path.reset_mask(like)

    def forward(self, z: Tensor, injection: Tensor | None) -> Tensor:
        """z, injection: (B, C, h, w) -> (B, C, h, w). ``injection`` None means no input at this resolution."""
        y = self.conv2(F.relu(self.gn1(self.conv1(z))))
        y = self.drop_path(self.drop(y))
        if injection is not None:
            y = y + injection
        y = self.gn2(y)
        return self.gn3(F.relu(y + z))


class Downsample(nn.Sequential):
    """From branch j to a coarser branch i > j: (i - j) strided 3x3 convs (not weight-normalized), each followed by
    an affine GroupNorm, ReLU between them."""

    def __init__(self, c_in: int, c_out: int, steps: int, groups: int) -> None:
        layers: list[nn.Module] = []
        for k in range(steps):
            last = k == steps - 1
            width = c_out if last else c_in
            layers += [plain_conv(c_in, width, 3, stride=2), nn.GroupNorm(groups, width)]
            if not last:
                layers.append(nn.ReLU())
        super().__init__(*layers)


class Upsample(nn.Module):
    """From branch j to a finer branch i < j: 1x1 conv (not weight-normalized) + affine GroupNorm, then nearest
    interpolation to branch i's size (a factor 2^(j - i) when the sizes divide evenly)."""

    def __init__(self, c_in: int, c_out: int, groups: int) -> None:
        super().__init__()
        self.conv = plain_conv(c_in, c_out, 1)
        self.norm = nn.GroupNorm(groups, c_out)

    def forward(self, z: Tensor, size: Sequence[int]) -> Tensor:
        return F.interpolate(self.norm(self.conv(z)), size=tuple(size), mode="nearest")


class Fusion(nn.Module):
    """Multiscale fusion: branch i receives the sum over all branches j, each brought to resolution i; then
    ReLU -> 1x1 conv (weight-normalized) -> GroupNorm per branch, with ``groups // 2`` groups and a learnable affine
    when ``post_affine``.

    Args:
        channels: C_i per branch. groups: GroupNorm groups of the up- and downsampling paths (even, >= 2).
        post_affine: learnable affine of the GroupNorm after the fusion (the authors' POST_GN_AFFINE).
    """

    def __init__(self, channels: Sequence[int], groups: int, post_affine: bool) -> None:
        super().__init__()
        n = len(channels)
        self.paths = nn.ModuleList()
        for i in range(n):
            row = nn.ModuleList()
            for j in range(n):
                if j == i:
                    row.append(nn.Identity())
                elif j < i:
                    row.append(Downsample(channels[j], channels[i], i - j, groups))
                else:
                    row.append(Upsample(channels[j], channels[i], groups))
            self.paths.append(row)
        self.post = nn.ModuleList(
            nn.Sequential(nn.ReLU(), wn_conv(c, c, 1), nn.GroupNorm(groups // 2, c, affine=post_affine))
            for c in channels
        )

    def forward(self, zs: Sequence[Tensor]) -> tuple[Tensor, ...]:
        out = []
        for i, row in enumerate(self.paths):
            size = zs[i].shape[-2:]
            total = zs[i]
            for j, path in enumerate(row):
                if j < i:
                    total = total + path(zs[j])
                elif j > i:
                    total = total + path(zs[j], size)
            out.append(self.post[i](total))
        return tuple(out)


class Bottleneck(nn.Module):
    """Head bottleneck: 1x1 -> 3x3 -> 1x1 to ``width * 4`` channels, each conv followed by a BatchNorm without affine,
    with a projected shortcut (1x1 conv + affine BatchNorm). (B, c_in, h, w) -> (B, 4 width, h, w)."""

    expansion = 4

    def __init__(self, c_in: int, width: int) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.body = nn.Sequential(
            plain_conv(c_in, width, 1),
            nn.BatchNorm2d(width, affine=False),
            nn.ReLU(),
            plain_conv(width, width, 3),
            nn.BatchNorm2d(width, affine=False),
            nn.ReLU(),
            plain_conv(width, c_out, 1),
            nn.BatchNorm2d(c_out, affine=False),
        )
        self.shortcut = nn.Sequential(plain_conv(c_in, c_out, 1), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


def conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int = 1, bias: bool = False) -> nn.Sequential:
    """Conv (with a bias when ``bias``) -> affine BatchNorm -> ReLU."""
    return nn.Sequential(plain_conv(c_in, c_out, kernel, stride, bias), nn.BatchNorm2d(c_out), nn.ReLU())


class ClassificationHead(nn.Module):
    """Per resolution a bottleneck; the finest is downsampled step by step (strided 3x3 conv with a bias + BN + ReLU)
    into each coarser one and added; then a 1x1 conv with a bias + BN + ReLU to ``final_channels`` (:meth:`features`),
    global average pooling and a linear classifier.

    Input: the equilibrium state, one (B, C_i, h_i, w_i) per branch. Output: logits (B, num_classes).
    """

    def __init__(self, channels: Sequence[int], head_channels: Sequence[int], final_channels: int, num_classes: int):
        super().__init__()
        widths = [h * Bottleneck.expansion for h in head_channels]
        self.increase = nn.ModuleList(Bottleneck(c, h) for c, h in zip(channels, head_channels))
        self.downsample = nn.ModuleList(
            conv_bn_relu(widths[i], widths[i + 1], 3, 2, bias=True) for i in range(len(widths) - 1)
        )
        self.final = conv_bn_relu(widths[-1], final_channels, 1, bias=True)
        self.num_features = final_channels
        self.classifier = nn.Linear(final_channels, num_classes) if num_classes > 0 else nn.Identity()

    def features(self, zs: Sequence[Tensor]) -> Tensor:
        """Unpooled features (B, final_channels, h_n, w_n) at the coarsest branch's resolution (branch n - 1)."""
        y = self.increase[0](zs[0])
        for i, down in enumerate(self.downsample):
            y = self.increase[i + 1](zs[i + 1]) + down(y)
        return self.final(y)

    def forward(self, zs: Sequence[Tensor]) -> Tensor:
        return self.classifier(self.features(zs).mean(dim=(2, 3)))
