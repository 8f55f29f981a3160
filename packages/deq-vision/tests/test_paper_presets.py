"""Every preset that reproduces a paper carries the numbers of the authors' configuration file (locuslab/deq, branch
master, MDEQ-Vision/experiments/*.yaml, with lib/config/default.py for what a file leaves out and tools/cls_train.py
for the loader and the schedule), and stops its solves as the authors' code does (one residual over the batch).

Counting: the authors' Broyden threshold T evaluates f at z0 and then takes T steps, T + 1 calls of f, so the forward
limit is max_iter = F_THRES + 1; in the backward their first evaluation, at u = 0, returns the incoming gradient, which
is our starting point u0, so backward_max_iter = B_THRES evaluates the same points.
"""

from __future__ import annotations

import math

import pytest
import timm
import torch

from deq_vision.configs import get_config

CIFAR_TRAIN, IMAGENET_TRAIN = 50_000, 1_281_167
COMMON = dict(NUM_GROUPS=8, EXPANSION_FACTOR=5, LR_SCHEDULER="cosine", ETA_MIN=1e-6)  # ETA_MIN: cls_train.py

# The yaml's numbers; GPUS x BATCH_SIZE_PER_GPU is the global batch. JR files: RAND_F_THRES_DELTA, JAC_* (LOSS).
YAMLS: dict[str, dict[str, object]] = {
    "cifar10-mdeq-tiny": dict(  # experiments/cifar/cls_mdeq_TINY.yaml
        NUM_LAYERS=10, F_THRES=18, B_THRES=20, STOP_MODE="rel", DROPOUT=0.25, POST_GN_AFFINE=False,
        NUM_CHANNELS=(24, 24), HEAD_CHANNELS=(8, 16), FINAL_CHANSIZE=200, DOWNSAMPLE_TIMES=0, GPUS=2,
        BATCH_SIZE_PER_GPU=64, END_EPOCH=50, PRETRAIN_STEPS=3000, OPTIMIZER="adam", LR=1e-3, WD=2.5e-6, AUGMENT=False,
    ),
    "cifar10-mdeq-large": dict(  # experiments/cifar/cls_mdeq_LARGE.yaml
        NUM_LAYERS=10, F_THRES=18, B_THRES=20, STOP_MODE="rel", DROPOUT=0.3, POST_GN_AFFINE=False,
        NUM_CHANNELS=(32, 64, 128, 256), HEAD_CHANNELS=(14, 28, 56, 112), FINAL_CHANSIZE=1680, DOWNSAMPLE_TIMES=0,
        GPUS=4, BATCH_SIZE_PER_GPU=32, END_EPOCH=220, PRETRAIN_STEPS=20_000, OPTIMIZER="adam", LR=1e-3, WD=0.0,
        AUGMENT=True,
    ),
    "cifar10-mdeq-large-jr": dict(  # experiments/cifar/cls_mdeq_LARGE_reg.yaml
        NUM_LAYERS=8, F_THRES=8, B_THRES=7, STOP_MODE="rel", DROPOUT=0.22, POST_GN_AFFINE=False,
        NUM_CHANNELS=(32, 64, 128, 256), HEAD_CHANNELS=(14, 28, 56, 112), FINAL_CHANSIZE=1680, DOWNSAMPLE_TIMES=0,
        GPUS=1, BATCH_SIZE_PER_GPU=96, END_EPOCH=220, PRETRAIN_STEPS=16_000, OPTIMIZER="adam", LR=1e-3, WD=0.0,
        AUGMENT=True, RAND_F_THRES_DELTA=2, JAC_LOSS_FREQ=0.02, JAC_LOSS_WEIGHT=0.4, JAC_STOP_EPOCH=90,
    ),
    "imagenet-mdeq-small": dict(  # experiments/imagenet/cls_mdeq_SMALL.yaml
        NUM_LAYERS=5, F_THRES=26, B_THRES=27, STOP_MODE="abs", DROPOUT=0.0, POST_GN_AFFINE=True,
        NUM_CHANNELS=(32, 64, 128, 256), HEAD_CHANNELS=(24, 48, 96, 192), FINAL_CHANSIZE=2048, DOWNSAMPLE_TIMES=2,
        GPUS=4, BATCH_SIZE_PER_GPU=32, END_EPOCH=100, PRETRAIN_STEPS=510_000, OPTIMIZER="sgd", LR=0.05, WD=5e-5,
        AUGMENT=True,
    ),
    "imagenet-mdeq-small-jr": dict(  # experiments/imagenet/cls_mdeq_SMALL_reg.yaml
        NUM_LAYERS=5, F_THRES=14, B_THRES=14, STOP_MODE="abs", DROPOUT=0.02, POST_GN_AFFINE=False,
        NUM_CHANNELS=(32, 64, 128, 256), HEAD_CHANNELS=(28, 56, 112, 224), FINAL_CHANSIZE=2048, DOWNSAMPLE_TIMES=2,
        GPUS=4, BATCH_SIZE_PER_GPU=32, END_EPOCH=100, PRETRAIN_STEPS=510_000, OPTIMIZER="sgd", LR=0.04, WD=2e-5,
        AUGMENT=True, RAND_F_THRES_DELTA=2, JAC_LOSS_FREQ=0.08, JAC_LOSS_WEIGHT=2.5, JAC_INCREMENTAL=50_000,
    ),
    "imagenet-mdeq-large": dict(  # experiments/imagenet/cls_mdeq_LARGE.yaml
        NUM_LAYERS=4, F_THRES=26, B_THRES=27, STOP_MODE="abs", DROPOUT=0.0, POST_GN_AFFINE=True,
        NUM_CHANNELS=(80, 160, 320, 640), HEAD_CHANNELS=(32, 64, 128, 256), FINAL_CHANSIZE=2048, DOWNSAMPLE_TIMES=2,
        GPUS=4, BATCH_SIZE_PER_GPU=32, END_EPOCH=100, PRETRAIN_STEPS=510_000, OPTIMIZER="sgd", LR=0.05, WD=1e-4,
        AUGMENT=True,
    ),
    "imagenet-mdeq-large-jr": dict(  # experiments/imagenet/cls_mdeq_LARGE_reg.yaml
        NUM_LAYERS=4, F_THRES=14, B_THRES=14, STOP_MODE="abs", DROPOUT=0.0, POST_GN_AFFINE=False,
        NUM_CHANNELS=(80, 160, 320, 640), HEAD_CHANNELS=(32, 64, 128, 256), FINAL_CHANSIZE=2048, DOWNSAMPLE_TIMES=2,
        GPUS=4, BATCH_SIZE_PER_GPU=32, END_EPOCH=100, PRETRAIN_STEPS=510_000, OPTIMIZER="sgd", LR=0.05, WD=1e-4,
        AUGMENT=True, RAND_F_THRES_DELTA=2, JAC_LOSS_FREQ=0.08, JAC_LOSS_WEIGHT=3.0, JAC_INCREMENTAL=50_000,
    ),
}  # fmt: skip


def _steps_per_epoch(name: str, batch: int) -> int:
    """len(train_loader) in cls_train.py: the last, partial batch is kept."""
    return math.ceil((IMAGENET_TRAIN if name.startswith("imagenet") else CIFAR_TRAIN) / batch)


@pytest.mark.parametrize("name", sorted(YAMLS))
def test_paper_presets_take_the_numbers_of_the_authors_yaml(name: str) -> None:
    yaml, cfg = {**COMMON, **YAMLS[name]}, get_config(name)
    deq, optim, data = cfg.deq, cfg.optim, cfg.data
    assert (deq.stop_over, deq.backward_stop_over) == ("batch", "batch")
    assert deq.pretrain_depth == yaml["NUM_LAYERS"] and deq.pretrain_steps == yaml["PRETRAIN_STEPS"]
    assert (deq.max_iter, deq.backward_max_iter, deq.eval_max_iter) == (yaml["F_THRES"] + 1, yaml["B_THRES"], None)
    solves = ("broyden", "broyden", yaml["STOP_MODE"], yaml["STOP_MODE"])
    assert (deq.solver, deq.backward_solver, deq.stop_mode, deq.backward_stop_mode) == solves
    assert deq.tol == deq.backward_tol == 1e-3  # the solvers' default eps; the MDEQ passes none
    batch = yaml["GPUS"] * yaml["BATCH_SIZE_PER_GPU"]
    per_epoch = _steps_per_epoch(name, batch)
    assert optim.batch_size == batch and optim.steps == yaml["END_EPOCH"] * per_epoch
    # momentum: SGD only (0.9 in the ImageNet files; timm's "sgd" is Nesterov, as their NESTEROV true)
    recipe = (yaml["OPTIMIZER"], yaml["LR"], yaml["WD"], 0.9)
    assert (optim.opt, optim.lr, optim.weight_decay, optim.momentum) == recipe
    assert (optim.sched, optim.min_lr, optim.warmup_steps) == (yaml["LR_SCHEDULER"], yaml["ETA_MIN"], 0)
    assert data.augment == yaml["AUGMENT"] and data.color_jitter == 0.0  # cls_train.py: crop and flip only
    # the model section: the architecture, as MDEQNet.parse_cfg reads it
    arch = _architecture(cfg.model.name)
    dropout = arch["dropout"] if cfg.model.dropout is None else cfg.model.dropout
    assert dropout == yaml["DROPOUT"] and arch["post_gn_affine"] == yaml["POST_GN_AFFINE"]
    widths = (yaml["NUM_CHANNELS"], yaml["HEAD_CHANNELS"], yaml["FINAL_CHANSIZE"])
    assert (arch["channels"], arch["head_channels"], arch["final_channels"]) == widths
    assert (arch["num_groups"], arch["expansion"]) == (yaml["NUM_GROUPS"], yaml["EXPANSION_FACTOR"])
    strides = (2, 2) if yaml["DOWNSAMPLE_TIMES"] == 2 else (1, 1)
    assert tuple(arch["stem_strides"]) == strides
    # JR (cls_function.train): gamma + 0.1 per JAC_INCREMENTAL steps after pretraining, off from JAC_STOP_EPOCH,
    # vecs=2 Hutchinson probes (jac_loss_estimate's default)
    jr = "JAC_LOSS_WEIGHT" in yaml
    assert (deq.jac_weight, deq.jac_prob) == ((yaml["JAC_LOSS_WEIGHT"], yaml["JAC_LOSS_FREQ"]) if jr else (0.0, 1.0))
    assert deq.jacobian_samples == (2 if jr else 1)
    increment = yaml.get("JAC_INCREMENTAL")
    assert (deq.jac_growth, deq.jac_every) == ((0.1, increment) if increment else (0.0, 0))
    assert deq.jac_stop == (yaml["JAC_STOP_EPOCH"] * per_epoch if "JAC_STOP_EPOCH" in yaml else 0)
    # The authors jitter F_THRES by U{-delta..+1} on Jacobian steps only (a fraction JAC_LOSS_FREQ of them); deq-core
    # jitters every step, so the presets keep the limit fixed: the authors' limit on the other steps.
    assert deq.max_iter_jitter == 0


def _architecture(name: str) -> dict[str, object]:
    """The architecture timm builds for ``name`` (on the meta device: shapes without numbers), read from its layers:
    the MDEQ arguments the authors' MODEL section sets."""
    with torch.device("meta"):
        model = timm.create_model(name)
    block = model.blocks[0]
    return dict(
        channels=model.channels, head_channels=tuple(b.body[0].out_channels for b in model.head.increase),
        final_channels=model.num_features, stem_strides=tuple(part[0].stride[0] for part in model.stem),
        expansion=block.conv1.out_channels // model.channels[0], num_groups=block.gn1.num_groups,
        dropout=block.drop.p, post_gn_affine=model.fusion.post[0][2].affine,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["glyphs-mdeq", "glyphs-mdeq-jr"])
def test_the_jr_claims_presets_stop_on_the_batch_and_probe_twice(name: str) -> None:
    """The CPU-scale presets of the JR paper's claims keep their own limits but take the authors' stopping rule, and
    the JR one the authors' two Hutchinson probes."""
    deq = get_config(name).deq
    assert (deq.stop_over, deq.backward_stop_over) == ("batch", "batch")
    assert deq.jacobian_samples == (2 if name.endswith("-jr") else 1)
