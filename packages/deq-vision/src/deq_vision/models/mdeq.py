"""The multiscale deep equilibrium model (Bai, Koltun & Kolter, NeurIPS 2020).

    x -> stem -> [1x1 conv + BN + ReLU] -> injection u (B, C_0, H, W)
    z* = f(z*; u), z = (z_0, ..., z_{n-1}), z_i of shape (B, C_i, H / 2^i, W / 2^i), solved from z = 0
    f(z; u) = fusion(block_0(z_0, u), block_1(z_1), ..., block_{n-1}(z_{n-1}))
    features = head bottlenecks(z*)           (B, final_channels, H / 2^(n-1), W / 2^(n-1))   forward_features
    logits = classifier(mean over h, w)       (B, num_classes)                                forward_head
    z*_i, one per branch                      (B, C_i, H / 2^i, W / 2^i)                       forward_intermediates

The solve and its implicit backward come from :class:`deq_core.DEQ` with a tuple state (one tensor per resolution).
The layers follow the authors' code (locuslab/deq, branch master, MDEQ-Vision/lib/models/mdeq_core.py and mdeq.py);
docs/fidelity.md lists each part against it.

This file also registers the architectures with timm, as timm's own model files do (``default_cfgs`` and the
``@register_model`` entrypoints at the end): after ``import deq_vision``, ``timm.create_model(NAME)`` builds
``mdeq_tiny_cifar10``, ``mdeq_large_cifar10``, ``mdeq_small_imagenet``, ``mdeq_large_imagenet``, the JR paper's
ImageNet variants ``mdeq_small_imagenet_jr`` and ``mdeq_large_imagenet_jr``, and the CPU-scale ``mdeq_mini``. Keyword
arguments (num_classes, in_chans, dropout, drop_path_rate, ...) override an entrypoint's ``model_args``;
``deq=deq_core.DEQ(...)`` replaces the architecture's default layer (solvers, limits, backward mode), and so does
``deq=dict(...)``, the layer's settings as plain data (:func:`~.deq_layer.layer_settings`; what an exported run's
config.json holds). Each model carries a ``pretrained_cfg`` describing the data it is for (input size, mean / std,
crop, classes); trained weights load as :mod:`~.build` describes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from timm.models import generate_default_cfgs, register_model
from torch import Tensor, nn
from torch.nn.utils import parametrize

import deq_core

from .blocks import BranchBlock, ClassificationHead, Fusion, conv_bn_relu
from .build import CIFAR10_DATA, GLYPHS_DIGITS_DATA, IMAGENET_DATA, build_model, pretrained_cfg
from .deq_layer import LayerSpec

# The standard deviation of the N(0, std) draw of every convolution that is not weight-normalized (MDEQClsNet.
# init_weights); a weight-normalized one computes its weight from g and v and keeps PyTorch's default.
PLAIN_CONV_INIT_STD = 0.01


def default_deq(max_iter: int = 19, backward_max_iter: int = 20, stop_mode: str = "rel") -> deq_core.DEQ:
    """The MDEQ paper's DEQ layer: Broyden to relative (or ``stop_mode``) residual 1e-3 in ``max_iter`` calls of f,
    implicit backward by Broyden to 1e-3 in ``backward_max_iter``; the training limits also hold at inference. The
    defaults are the CIFAR-10 files' F_THRES 18 (a Broyden threshold T makes T + 1 calls of f) and B_THRES 20 (their
    backward's first call, at u = 0, gives the incoming gradient, our starting point). Each sample stops on its own
    residual (deq-core's default); the presets stop on the batch's, as the authors' solvers do. Each registered
    architecture (its entrypoint below) passes its own limits."""
    return deq_core.DEQ(
        solver=deq_core.Broyden(),
        max_iter=max_iter,
        tol=1e-3,
        stop_mode=stop_mode,
        backward=deq_core.Implicit(deq_core.Broyden(), max_iter=backward_max_iter, tol=1e-3),
    )


class MDEQ(nn.Module):
    """Multiscale DEQ classifier.

    Args:
        channels: C_i per branch (branch i works at 1 / 2^i of the stem's resolution).
        head_channels: bottleneck width per branch in the head (the bottleneck outputs 4x that).
        final_channels: width of the head's last 1x1 conv (the pooled feature size).
        num_classes: classifier outputs (0: no classifier, ``forward`` returns pooled features).
        in_chans: image channels.
        stem_strides: strides of the stem's two 3x3 convs, e.g. (1, 1) for 32x32 CIFAR, (2, 2) for 224x224 ImageNet.
        expansion: inner width factor of each branch block. num_groups: GroupNorm groups of the blocks and the fusion
            paths; the GroupNorm after the fusion has ``num_groups // 2``.
        dropout: variational dropout in the branch blocks (one value per channel, shared by the pixels and the solver
            iterations). post_gn_affine: learnable affine of the GroupNorms after the fusion (the blocks' are affine).
        deq: the :class:`deq_core.DEQ` layer that finds z* and carries gradients through it (forward solver and
            limits, backward mode: ``Implicit``, ``Phantom`` or ``JFB``, inference limits). None: :func:`default_deq`
            (the MDEQ paper's Broyden forward and implicit Broyden backward, 19 / 20 calls of f, tolerance 1e-3).
        drop_rate: dropout before the classifier (timm's ``drop_rate``).
        drop_path_rate: stochastic depth in every branch block (timm's ``drop_path_rate``; the branches run in
            parallel inside one weight-tied cell, so all get this rate): in training, a sample's residual branch is
            dropped with this probability, one draw per forward pass shared by all solver iterations.

    The stem's output enters branch 0 through a 1x1 conv + BN + ReLU (``injection``) when the stem strides or there
    are more than two branches, directly otherwise (the authors' ``stage0``). Convolutions without weight
    normalization start from N(0, 0.01) weights and biases (:data:`PLAIN_CONV_INIT_STD`).
    """

    def __init__(
        self,
        channels: Sequence[int],
        head_channels: Sequence[int],
        final_channels: int,
        num_classes: int = 1000,
        in_chans: int = 3,
        stem_strides: Sequence[int] = (1, 1),
        expansion: int = 5,
        num_groups: int = 8,
        dropout: float = 0.0,
        post_gn_affine: bool = False,
        deq: deq_core.DEQ | None = None,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
    ) -> None:
        super().__init__()
        if len(channels) != len(head_channels) or not channels:
            raise ValueError(f"channels {channels} and head_channels {head_channels} need the same, nonzero length.")
        if num_groups < 2:
            raise ValueError(f"num_groups must be >= 2 (the GroupNorm after the fusion has num_groups // 2), got "
                             f"{num_groups}.")  # fmt: skip
        for c in channels:
            if c % num_groups or c % (num_groups // 2):
                raise ValueError(f"every branch width must be divisible by num_groups={num_groups} and by "
                                 f"num_groups // 2, got {channels}.")  # fmt: skip
        if len(stem_strides) != 2:
            raise ValueError(f"stem_strides needs two strides, got {stem_strides}.")
        if not 0.0 <= drop_path_rate < 1.0:
            raise ValueError(f"drop_path_rate must be in [0, 1), got {drop_path_rate}.")
        self.channels = tuple(int(c) for c in channels)
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.stem = nn.Sequential(
            conv_bn_relu(in_chans, self.channels[0], 3, stem_strides[0]),
            conv_bn_relu(self.channels[0], self.channels[0], 3, stem_strides[1]),
        )
        strided = any(s != 1 for s in stem_strides)
        self.injection: nn.Sequential | None = (
            conv_bn_relu(self.channels[0], self.channels[0], 1) if strided or len(self.channels) > 2 else None
        )
        self.blocks = nn.ModuleList(
            BranchBlock(c, expansion, num_groups, dropout, drop_path_rate) for c in self.channels
        )
        self.fusion = Fusion(self.channels, num_groups, post_gn_affine)
        if deq is not None and not isinstance(deq, deq_core.DEQ):
            raise TypeError(f"deq must be a deq_core.DEQ layer (or None for default_deq()), got {type(deq).__name__}.")
        self.deq = default_deq() if deq is None else deq
        self.head: ClassificationHead | None = ClassificationHead(
            self.channels, head_channels, final_channels, num_classes
        )
        self.head_drop = nn.Dropout(drop_rate)
        self.drop_rate = drop_rate
        self.num_features = self.head_hidden_size = final_channels
        # timm's feature maps (features_only=True, forward_intermediates): the equilibrium state of each branch.
        stride = stem_strides[0] * stem_strides[1]
        self.feature_info = [
            dict(num_chs=c, reduction=stride * 2**i, module=f"blocks.{i}") for i, c in enumerate(self.channels)
        ]
        self._init_plain_convs()

    @torch.no_grad()
    def _init_plain_convs(self) -> None:
        """Weights and biases of every convolution without weight normalization (stem, injection, fusion paths,
        head) drawn from N(0, :data:`PLAIN_CONV_INIT_STD`), as the authors' ``init_weights``; the weight-normalized
        ones keep PyTorch's default (their ``init_weights`` draw is overwritten by g v / ||v|| in every pass)."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d) and not parametrize.is_parametrized(module):
                module.weight.normal_(0.0, PLAIN_CONV_INIT_STD)
                if module.bias is not None:
                    module.bias.normal_(0.0, PLAIN_CONV_INIT_STD)

    def cell(self, z: Sequence[Tensor], injection: Tensor) -> tuple[Tensor, ...]:
        """f(z; u): the equilibrium map. z: one (B, C_i, h_i, w_i) per branch; injection: (B, C_0, h_0, w_0)."""
        updated = [block(z_i, injection if i == 0 else None) for i, (block, z_i) in enumerate(zip(self.blocks, z))]
        return self.fusion(updated)

    def initial_state(self, injection: Tensor) -> tuple[Tensor, ...]:
        """z0 = 0 at every resolution, from the injection's shape (B, C_0, H, W)."""
        b, _, h, w = injection.shape
        shapes = []
        for i, c in enumerate(self.channels):
            shapes.append((b, c, -(-h // 2**i), -(-w // 2**i)))
        return tuple(injection.new_zeros(s) for s in shapes)

    def equilibrium(self, x: Tensor) -> tuple[tuple[Tensor, ...], deq_core.DEQInfo]:
        """Images (B, in_chans, H, W) -> (the state f(z*), one tensor per branch; DEQ statistics). The layer follows
        its Plan when one is set (:func:`deq_core.use_plan`: pretraining unroll, a limit, the Jacobian term)."""
        injection = self.stem(x)
        if self.injection is not None:
            injection = self.injection(injection)
        z0 = self.initial_state(injection)
        for block, z in zip(self.blocks, z0):
            block.reset_masks(z)
        with deq_core.cached_weights(self):
            z, info = self.deq(lambda state: self.cell(state, injection), z0)
        return tuple(z), info

    def _head(self) -> ClassificationHead:
        if self.head is None:
            raise RuntimeError(
                "this MDEQ's head was pruned (features_only=True / prune_intermediate_layers): it gives the branch "
                "states only, forward_intermediates(x, intermediates_only=True)."
            )
        return self.head

    def forward_features(self, x: Tensor) -> Tensor:
        """Images (B, in_chans, H, W) -> unpooled features (B, final_channels, h, w) after the equilibrium solve (at
        the layer's training / eval limits): the head's last map, at the coarsest branch's resolution,
        h = H / (s 2^(n-1)) with s the stem's total stride and n the number of branches (e.g. (B, 1680, 4, 4) for
        mdeq_large_cifar10 at 32x32, (B, 2048, 7, 7) for the ImageNet models at 224x224)."""
        z, _ = self.equilibrium(x)
        return self._head().features(z)

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Unpooled features (B, final_channels, h, w) -> logits (B, num_classes); with ``pre_logits`` the pooled
        features (B, final_channels) after ``drop_rate`` dropout, before the classifier."""
        pooled = self.head_drop(x.mean(dim=(2, 3)))
        return pooled if pre_logits else self._head().classifier(pooled)

    def forward(self, x: Tensor, *, return_info: bool = False) -> Tensor | tuple[Tensor, deq_core.DEQInfo]:
        """Images (B, in_chans, H, W) -> logits (B, num_classes); with ``return_info`` also the DEQ statistics;
        ``forward(x) == forward_head(forward_features(x))``.

        A training step's choices reach the layer as a plan, not as arguments:
        ``with deq_core.use_plan(model, deq_core.Plan(unroll=2, jacobian_loss=True)): model(x, return_info=True)``
        unrolls f twice with ordinary backprop (pretraining) and estimates ||J_f(z*)||_F^2 / D
        (``info.jacobian_loss``); ``Plan(max_iter=k)`` stops the solve at k calls of f.
        """
        z, info = self.equilibrium(x)
        logits = self.forward_head(self._head().features(z))
        return (logits, info) if return_info else logits

    def forward_intermediates(
        self,
        x: Tensor,
        indices: int | Sequence[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[Tensor] | tuple[Tensor, list[Tensor]]:
        """timm's multi-scale features: the equilibrium state f(z*) of the branches ``indices`` (None: all; an int n:
        the last n; a sequence: those, negative from the end), branch i as (B, C_i, h / 2^i, w / 2^i) with (h, w) the
        stem's output (``feature_info``: channels and reduction per branch); with the unpooled
        :meth:`forward_features` map unless ``intermediates_only``. One solve at the layer's training / eval limits
        gives every branch (the cell couples all resolutions), so ``stop_early`` saves nothing and is ignored, as is
        ``norm`` (the MDEQ has no final norm). ``timm.create_model(name, features_only=True)`` returns these maps.
        """
        if output_fmt != "NCHW":
            raise ValueError(f"the MDEQ's feature maps are NCHW, got output_fmt={output_fmt!r}.")
        take = _take_indices(len(self.channels), indices)
        z, _ = self.equilibrium(x)
        intermediates = [z[i] for i in take]
        if intermediates_only:
            return intermediates
        return self._head().features(z), intermediates

    def prune_intermediate_layers(
        self, indices: int | Sequence[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Keep what :meth:`forward_intermediates` needs for ``indices`` (timm's features_only does this): with
        ``prune_head`` the classification head (bottlenecks, final conv, classifier) is removed, so the model gives
        feature maps only. Every branch stays (the equilibrium couples them); there is no norm to prune. Returns the
        absolute indices."""
        take = _take_indices(len(self.channels), indices)
        if prune_head:
            self.head = None
            self.head_drop = nn.Identity()
            self.num_classes = 0
        return take

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Refused with ``enable=True`` (NotImplementedError; ``False`` is a no-op): gradient checkpointing trades
        stored activations for recomputation, and the MDEQ stores none across its solve: the implicit backward
        (``deq_core.Implicit``) keeps one tracked call of f at z*, whatever the number of solver iterations, and
        solves for the gradient instead of replaying them. Lower the memory with a smaller batch or
        ``deq_core.JFB()``."""
        if enable:
            raise NotImplementedError(
                "the MDEQ has no gradient checkpointing: its implicit backward keeps no activations of the solver's "
                "iterations (one tracked call of f), so there is nothing to recompute."
            )

    def no_weight_decay(self) -> set[str]:
        """Parameter names timm's optimizer factory exempts from weight decay beyond its own rule (biases and other
        1-D parameters: the GroupNorm / BatchNorm affines): none. The weight-norm magnitudes g
        (``...parametrizations.weight.original0``, shape (C_out, 1, 1, 1)) are each conv's scale, the only part of
        w = g v / ||v|| that decay can shrink, so they are decayed like a plain conv weight."""
        return set()

    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups from input to output, as timm's regex matchers (for ``timm.optim``'s layer-wise learning
        rate decay, ``param_groups_layer_decay`` / ``create_optimizer_v2(..., layer_decay=...)``).

        Coarse: stem (with the injection's conv), the equilibrium cell (branch blocks and fusion: one weight-tied
        layer), the head's bottlenecks; the classifier comes last (unmatched names go last in timm). Fine: each stem
        conv, the injection's conv, the branch blocks, the fusion, then the head in data-flow order (bottleneck 0,
        downsample 0, bottleneck 1, ..., final conv).
        """
        if coarse:
            return dict(
                stem=r"^(?:stem|injection)\.", cell=r"^(?:blocks|fusion)\.",
                head=r"^head\.(?:increase|downsample|final)\.",
            )  # fmt: skip
        return dict(
            stem=[(r"^stem\.(\d+)\.", None), (r"^injection\.", (2,))],
            cell=[(r"^blocks\.", (0,)), (r"^fusion\.", (1,))],
            head=[
                (r"^head\.increase\.(\d+)\.", (0,)),
                (r"^head\.downsample\.(\d+)\.", (1,)),
                (r"^head\.final\.", (len(self.channels),)),
            ],
        )

    def get_classifier(self) -> nn.Module:
        """The linear classifier (nn.Identity when num_classes is 0)."""
        return self._head().classifier

    @torch.no_grad()
    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new, freshly initialized classifier with ``num_classes`` outputs (0: none, the model returns pooled
        features). ``global_pool``: only "avg" (the MDEQ pools by its mean), or None."""
        if global_pool not in (None, "avg"):
            raise ValueError(
                f"the MDEQ pools by the spatial mean: global_pool must be 'avg' or None, not {global_pool}."
            )
        head = self._head()
        self.num_classes = num_classes
        head.classifier = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


def _take_indices(count: int, indices: int | Sequence[int] | None) -> list[int]:
    """timm's selection of feature maps among ``count``: None all, an int n the last n, a sequence those (negative
    from the end); ValueError out of range."""
    if indices is None:
        return list(range(count))
    if isinstance(indices, int):
        if not 0 < indices <= count:
            raise ValueError(f"the MDEQ has {count} feature maps; cannot take the last {indices}.")
        return list(range(count - indices, count))
    taken = [i + count if i < 0 else i for i in indices]
    bad = [i for i, t in zip(indices, taken) if not 0 <= t < count]
    if bad:
        raise ValueError(f"feature indices {bad} out of range for the MDEQ's {count} feature maps (0 to {count - 1}).")
    return taken


# timm registration. Each entrypoint's ``model_args`` are the MODEL section of the authors' file it names (locuslab/deq,
# branch master, MDEQ-Vision/experiments/): branch widths, head widths, final width, stem strides (DOWNSAMPLE_TIMES 0:
# (1, 1), 2: (2, 2)), dropout and the affine after the fusion; all have 8 GroupNorm groups and expansion 5 (the MDEQ's
# defaults). Its default layer, used when no ``deq`` is given, is the MDEQ paper's (default_deq) with the file's
# F_THRES + 1 calls of f forward (a Broyden threshold T evaluates f(z0) and takes T steps) and B_THRES backward (their
# first backward call, at u = 0, returns the incoming gradient: our starting point). The presets in deq_vision.configs
# build their own layer from the config. Classes and input channels come from the pretrained_cfg.


def _cfg(data: Mapping[str, Any], pool_size: tuple[int, int], description: str) -> dict[str, Any]:
    """An MDEQ's pretrained_cfg (:func:`~.build.pretrained_cfg`): ``pool_size`` is the head's map at that input."""
    return pretrained_cfg(data, pool_size, description, first_conv="stem.0.0", classifier="head.classifier")


default_cfgs = generate_default_cfgs(
    {
        "mdeq_tiny_cifar10": _cfg(CIFAR10_DATA, (16, 16), "MDEQ-tiny, CIFAR-10 (MDEQ paper)"),
        "mdeq_large_cifar10": _cfg(CIFAR10_DATA, (4, 4), "MDEQ-large, CIFAR-10 (MDEQ and JR papers)"),
        "mdeq_small_imagenet": _cfg(IMAGENET_DATA, (7, 7), "MDEQ-small, ImageNet (MDEQ paper)"),
        "mdeq_small_imagenet_jr": _cfg(IMAGENET_DATA, (7, 7), "MDEQ-small as trained with JR, ImageNet (JR paper)"),
        "mdeq_large_imagenet": _cfg(IMAGENET_DATA, (7, 7), "MDEQ-large, ImageNet (MDEQ paper)"),
        "mdeq_large_imagenet_jr": _cfg(IMAGENET_DATA, (7, 7), "MDEQ-large as trained with JR, ImageNet (JR paper)"),
        "mdeq_mini": _cfg(GLYPHS_DIGITS_DATA, (8, 8), "CPU-scale MDEQ: 16x16 grayscale digits and glyphs"),
    }
)


def _create_mdeq(variant: str, pretrained: bool, deq: LayerSpec, default: deq_core.DEQ, **kwargs: Any) -> MDEQ:
    """The MDEQ ``variant`` built by :func:`~.build.build_model`: ``kwargs`` are the MDEQ's arguments, ``deq`` the
    caller's layer and ``default`` the architecture's. ``features_only=True`` gives timm's FeatureGetterNet over
    :meth:`MDEQ.forward_intermediates`, one map per branch."""
    features = dict(out_indices=tuple(range(len(kwargs["channels"]))), feature_cls="getter")
    return build_model(MDEQ, variant, pretrained, default_deq=default, deq=deq, feature_cfg=features, **kwargs)


@register_model
def mdeq_tiny_cifar10(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-tiny for 32x32 CIFAR-10 (about 170K parameters; cifar/cls_mdeq_TINY.yaml)."""
    model_args = dict(channels=(24, 24), head_channels=(8, 16), final_channels=200, stem_strides=(1, 1), dropout=0.25)
    default = default_deq(max_iter=18 + 1, backward_max_iter=20)
    return _create_mdeq("mdeq_tiny_cifar10", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_large_cifar10(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-large for 32x32 CIFAR-10 (about 10M parameters; cifar/cls_mdeq_LARGE.yaml; its JR run,
    cls_mdeq_LARGE_reg.yaml, changes only the dropout: a preset setting)."""
    model_args = dict(
        channels=(32, 64, 128, 256), head_channels=(14, 28, 56, 112), final_channels=1680, stem_strides=(1, 1),
        dropout=0.3,
    )  # fmt: skip
    default = default_deq(max_iter=18 + 1, backward_max_iter=20)
    return _create_mdeq("mdeq_large_cifar10", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_small_imagenet(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-small for 224x224 ImageNet (about 18M parameters; imagenet/cls_mdeq_SMALL.yaml)."""
    model_args = dict(
        channels=(32, 64, 128, 256), head_channels=(24, 48, 96, 192), final_channels=2048, stem_strides=(2, 2),
        dropout=0.0, post_gn_affine=True,
    )  # fmt: skip
    default = default_deq(max_iter=26 + 1, backward_max_iter=27, stop_mode="abs")
    return _create_mdeq("mdeq_small_imagenet", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_small_imagenet_jr(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-small as the JR paper trains it on 224x224 ImageNet (imagenet/cls_mdeq_SMALL_reg.yaml): a wider head,
    dropout 0.02, no affine after the fusion (about 19M parameters)."""
    model_args = dict(
        channels=(32, 64, 128, 256), head_channels=(28, 56, 112, 224), final_channels=2048, stem_strides=(2, 2),
        dropout=0.02, post_gn_affine=False,
    )  # fmt: skip
    default = default_deq(max_iter=14 + 1, backward_max_iter=14, stop_mode="abs")
    return _create_mdeq("mdeq_small_imagenet_jr", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_large_imagenet(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-large for 224x224 ImageNet (about 63M parameters; imagenet/cls_mdeq_LARGE.yaml)."""
    model_args = dict(
        channels=(80, 160, 320, 640), head_channels=(32, 64, 128, 256), final_channels=2048, stem_strides=(2, 2),
        dropout=0.0, post_gn_affine=True,
    )  # fmt: skip
    default = default_deq(max_iter=26 + 1, backward_max_iter=27, stop_mode="abs")
    return _create_mdeq("mdeq_large_imagenet", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_large_imagenet_jr(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """MDEQ-large as the JR paper trains it on 224x224 ImageNet (imagenet/cls_mdeq_LARGE_reg.yaml): no affine after
    the fusion (about 63M parameters)."""
    model_args = dict(
        channels=(80, 160, 320, 640), head_channels=(32, 64, 128, 256), final_channels=2048, stem_strides=(2, 2),
        dropout=0.0, post_gn_affine=False,
    )  # fmt: skip
    default = default_deq(max_iter=14 + 1, backward_max_iter=14, stop_mode="abs")
    return _create_mdeq("mdeq_large_imagenet_jr", pretrained, deq, default, **dict(model_args, **kwargs))


@register_model
def mdeq_mini(pretrained: bool = False, deq: LayerSpec = None, **kwargs: Any) -> MDEQ:
    """A narrow two-branch MDEQ (about 90K parameters) for CPU-scale runs on 16x16 digits and glyphs: branches at
    16x16 and 8x8."""
    model_args = dict(
        channels=(16, 32), head_channels=(8, 16), final_channels=64, stem_strides=(1, 1), expansion=2, num_groups=4,
        dropout=0.1,
    )  # fmt: skip
    default = default_deq(max_iter=12, backward_max_iter=12)
    return _create_mdeq("mdeq_mini", pretrained, deq, default, **dict(model_args, **kwargs))
