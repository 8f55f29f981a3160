"""The MDEQ as the authors' code builds it (locuslab/deq, branch master, MDEQ-Vision/lib/models/mdeq_core.py and
mdeq.py): block dropout with one mask value per channel, affine block GroupNorms, a post-fusion GroupNorm with half the
groups, fusion paths without weight normalization, the injection's 1x1 conv + BN + ReLU (``stage0``) beyond two
branches or after a strided stem, the head's bottlenecks without BatchNorm affines, and N(0, 0.01) for the convolutions
that are not weight-normalized."""

from __future__ import annotations

import pytest
import timm
import torch
from timm.models import group_parameters
from torch import nn
from torch.nn.utils import parametrize

from deq_vision.models import default_deq
from deq_vision.models.blocks import Downsample, Upsample


def _mini(**kwargs: object) -> nn.Module:
    return timm.create_model("mdeq_mini", deq=default_deq(max_iter=3, backward_max_iter=3), **kwargs)


def test_block_dropout_draws_one_value_per_sample_and_channel_shared_by_all_pixels() -> None:
    """VariationalHidDropout2d (spatial): a dropped channel is zero at every pixel, in every call of f of the pass."""
    torch.manual_seed(0)
    model = _mini(dropout=0.5).train()
    z = torch.ones(4, 16, 16, 16)
    block = model.blocks[0]
    block.reset_masks(z)
    assert block.drop.mask is not None and block.drop.mask.shape == (4, 16, 1, 1)
    out = block.drop(z)
    per_channel = out.flatten(2)
    assert torch.equal(per_channel.amin(dim=2), per_channel.amax(dim=2))  # one value over the 16 x 16 pixels
    assert set(per_channel[:, :, 0].unique().tolist()) == {0.0, 2.0}
    torch.testing.assert_close(block.drop(z), out, rtol=0, atol=0)  # the same mask at the next call


def test_block_group_norms_are_affine_and_the_post_fusion_norm_has_half_the_groups() -> None:
    """BasicBlock: gn1, gn2, gn3 all with BLOCK_GN_AFFINE (true); MDEQModule.post_fuse_layers: GroupNorm(NUM_GROUPS
    // 2) with POST_GN_AFFINE; the fusion paths' GroupNorms: NUM_GROUPS groups, FUSE_GN_AFFINE (true)."""
    for name, groups, post_affine in (("mdeq_mini", 4, False), ("mdeq_tiny_cifar10", 8, False)):
        model = timm.create_model(name, deq=default_deq(max_iter=2))
        for block in model.blocks:
            for norm in (block.gn1, block.gn2, block.gn3):
                assert norm.affine and norm.num_groups == groups, name
        for post in model.fusion.post:
            norm = post[-1]
            assert isinstance(norm, nn.GroupNorm) and norm.num_groups == groups // 2 and norm.affine == post_affine
        paths = [m for m in model.fusion.paths.modules() if isinstance(m, nn.GroupNorm)]
        assert paths and all(norm.num_groups == groups and norm.affine for norm in paths)
    imagenet = timm.create_model("mdeq_small_imagenet", deq=default_deq(max_iter=2))
    assert all(post[-1].affine and post[-1].num_groups == 4 for post in imagenet.fusion.post)  # POST_GN_AFFINE true


def test_only_the_block_convs_and_the_post_fusion_conv_are_weight_normalized() -> None:
    """MDEQModule._wnorm: the blocks' conv1, conv2 and each post-fusion 1x1 conv; the up- and downsampling convs keep
    a plain weight."""
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(max_iter=2))
    for block in model.blocks:
        assert parametrize.is_parametrized(block.conv1, "weight") and parametrize.is_parametrized(block.conv2, "weight")
    assert all(parametrize.is_parametrized(post[1], "weight") for post in model.fusion.post)
    paths = [m for m in model.fusion.paths.modules() if isinstance(m, (Downsample, Upsample))]
    convs = [m for path in paths for m in path.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 6 + 10  # 6 upsampling paths of one conv; 6 downsampling ones of 1, 2, 3, 1, 2, 1 convs
    for conv in convs:
        assert not parametrize.is_parametrized(conv) and isinstance(conv.weight, nn.Parameter)
    names = [n for n, _ in model.fusion.paths.named_parameters()]
    assert names and not any("parametrizations" in n for n in names)


def test_the_injection_passes_a_1x1_conv_bn_relu_beyond_two_branches_or_after_a_strided_stem() -> None:
    """MDEQNet.stage0: absent only when the stem keeps the resolution (DOWNSAMPLE_TIMES 0) and there are at most two
    branches; then branch 0 receives stage0(stem(x))."""
    assert _mini().injection is None
    assert timm.create_model("mdeq_tiny_cifar10", deq=default_deq(max_iter=2)).injection is None
    for name in ("mdeq_large_cifar10", "mdeq_small_imagenet"):
        stage = timm.create_model(name, deq=default_deq(max_iter=2)).injection
        conv, norm, relu = stage
        assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (1, 1) and conv.bias is None
        assert conv.in_channels == conv.out_channels == 32 and not parametrize.is_parametrized(conv)
        assert isinstance(norm, nn.BatchNorm2d) and norm.affine and isinstance(relu, nn.ReLU)
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(max_iter=2)).eval()
    x = torch.randn(2, 3, 32, 32)
    seen: list[torch.Tensor] = []
    original = model.cell
    model.cell = lambda z, injection: seen.append(injection) or original(z, injection)  # type: ignore[method-assign]
    with torch.no_grad():
        model(x)
        expected = model.injection(model.stem(x))
    torch.testing.assert_close(seen[0], expected, rtol=0, atol=0)
    # timm's layer-wise groups: the injection's conv after the stem's two, before the cell
    fine = group_parameters(model, model.group_matcher(), reverse=True)
    assert fine["stem.1.0.weight"] < fine["injection.0.weight"] < fine["blocks.0.gn1.weight"]
    assert group_parameters(model, model.group_matcher(coarse=True), reverse=True)["injection.0.weight"] == 0


def test_the_head_bottlenecks_have_no_batchnorm_affine_and_its_merge_convs_a_bias() -> None:
    """mdeq.py Bottleneck: bn1..bn3 with affine=False, the shortcut's BatchNorm affine; the downsampling 3x3 convs and
    the final 1x1 conv with a bias."""
    head = _mini().head
    for bottleneck in head.increase:
        norms = [m for m in bottleneck.body if isinstance(m, nn.BatchNorm2d)]
        assert len(norms) == 3 and not any(norm.affine for norm in norms)
        assert bottleneck.shortcut[1].affine and bottleneck.shortcut[0].bias is None
    assert all(down[0].bias is not None for down in head.downsample)
    assert head.final[0].bias is not None


def test_convs_without_weight_norm_start_from_normal_0_001() -> None:
    """MDEQClsNet.init_weights draws every Conv2d's weight and bias from N(0, 0.01); a weight-normalized conv
    recomputes its weight from g and v, so only the others keep the draw (checked on the ones with >= 10^4 weights);
    the weight-normalized convs keep PyTorch's default (||v|| per output = g)."""
    torch.manual_seed(0)
    model = timm.create_model("mdeq_large_cifar10", deq=default_deq(max_iter=2))
    plain = [m for m in model.modules() if isinstance(m, nn.Conv2d) and not parametrize.is_parametrized(m)]
    assert len(plain) > 20
    for conv in plain:
        if conv.weight.numel() >= 10_000:
            assert float(conv.weight.detach().std()) == pytest.approx(0.01, rel=0.05)
            assert abs(float(conv.weight.detach().mean())) < 1e-3
    biases = torch.cat([conv.bias.detach() for conv in plain if conv.bias is not None])
    assert biases.numel() > 1000 and float(biases.std()) == pytest.approx(0.01, rel=0.1)
    weighted = model.blocks[0].conv1
    # PyTorch's default for 288 inputs: about 1 / sqrt(3 * 288) = 0.034
    assert float(weighted.weight.detach().std()) > 0.015
