"""Named presets.

Paper presets (sized for GPUs; the numbers of the authors' configuration files, locuslab/deq branch master,
MDEQ-Vision/experiments/*.yaml, each cited by its preset; epochs converted to optimizer steps at the given global
batch, GPUS x BATCH_SIZE_PER_GPU):

- ``cifar10-mdeq-tiny``, ``cifar10-mdeq-large``, ``cifar10-mdeq-large-jr``
- ``imagenet-mdeq-small``, ``imagenet-mdeq-small-jr``, ``imagenet-mdeq-large``, ``imagenet-mdeq-large-jr``
- ``cifar10-resnet18``, ``cifar10-resnet101``, ``imagenet-resnet18``, ``imagenet-resnet101``: timm's ResNets through
  the same pipeline (standard SGD recipes, not from the papers).

The MDEQ paper presets solve as the authors' code does: Broyden both ways, stopping when the residual of the whole batch
meets the tolerance (``REFERENCE_STOP``), unrolled pretraining ``NUM_LAYERS`` deep, cosine decay to 1e-6 (their
``CosineAnnealingLR(eta_min=1e-6)``). Limits: their Broyden threshold T evaluates f(z0) and then takes T steps, so the
forward ``max_iter`` (calls of f, z0's included) is ``F_THRES + 1``; their backward's first call, at u = 0, returns the
incoming gradient, which is our starting point, so ``backward_max_iter`` is ``B_THRES`` (:func:`_authors_limits`).
docs/fidelity.md lists what still differs (e.g. the JR runs' jittered limit).

CPU presets: ``digits-mdeq``, ``digits-mdeq-jr``, ``digits-resnet`` (one budget: the CPU-scale result of
docs/deq-vision-results.md);
``glyphs-mdeq``, ``glyphs-mdeq-jr``, ``glyphs-resnet`` (one budget: the JR paper's claims, ``python -m lab.vision``;
the two MDEQs stop on the batch as the authors' solvers do, and the JR one takes their two Hutchinson probes);
and ``tiny-mdeq``, ``tiny-mdeq-jr``, ``tiny-resnet`` (a few seconds each, on a tiny CIFAR-format folder; for tests).
The digits and tiny presets reproduce no paper and keep deq-core's per-sample stopping rule.

Each preset is a dict of settings applied to ``Config()`` by ``replace_config``: by short name (``steps``, ``lr``,
``dataset``; each is in one section only, so it names ``optim.steps``, ``optim.lr``, ``data.dataset``, and ``model``
names ``model.name``) or by dotted name (``deq_settings(max_iter=12)``: ``deq.max_iter``).
"""

from __future__ import annotations

from deq_core.train.deq_config import REFERENCE_STOP, deq_settings
from deq_core.train.run_config import replace_config

from .config import Config

CIFAR_TRAIN, IMAGENET_TRAIN = 50_000, 1_281_167
AUTHORS_MIN_LR = 1e-6  # tools/cls_train.py: CosineAnnealingLR(optimizer, len(train_loader) * END_EPOCH, eta_min=1e-6)
JR_PROBES = 2  # lib/jacobian.py jac_loss_estimate(vecs=2), as MDEQ-Vision calls it


def _steps(epochs: int, n_train: int, batch: int) -> int:
    """Optimizer steps of ``epochs`` passes over ``n_train`` images in batches of ``batch``, each pass ending with
    its partial batch (the authors' loader: ``len(train_loader)`` = ceil(n_train / batch) steps per epoch)."""
    return epochs * -(-n_train // batch)


def _authors_limits(f_thres: int, b_thres: int) -> dict[str, int]:
    """The DEQ limits of a configuration file's Broyden thresholds F_THRES, B_THRES, as calls of f: ``max_iter`` =
    F_THRES + 1 (f(z0), then F_THRES steps), ``backward_max_iter`` = B_THRES (their first backward call, at u = 0,
    gives the gradient we start from); inference keeps the training limit, as their ``validate`` does."""
    return deq_settings(max_iter=f_thres + 1, backward_max_iter=b_thres)


_CIFAR_MDEQ = dict(
    dataset="cifar10", image_size=32,
    **deq_settings(
        **REFERENCE_STOP, solver="broyden", backward_solver="broyden", stop_mode="rel", tol=1e-3, backward_tol=1e-3,
    ),
    opt="adam", lr=1e-3, sched="cosine", min_lr=AUTHORS_MIN_LR, eval_every=2000, log_every=100, save_every=2000,
)  # fmt: skip
_IMAGENET = dict(
    dataset="imagenet",
    image_size=224,
    scale_min=0.08,
    color_jitter=0.4,
    batch_size=128,
    opt="sgd",
    momentum=0.9,
    sched="cosine",
    steps=_steps(100, IMAGENET_TRAIN, 128),
    eval_every=20_000,
    log_every=500,
    save_every=10_000,
)
# The ImageNet files: 4 GPUs x 32 images, 100 epochs, SGD (Nesterov, momentum 0.9), cosine to 1e-6, random resized
# crop and flip without color jitter, PRETRAIN_STEPS 510,000, Broyden to absolute residual 1e-3 both ways (STOP_MODE
# abs reaches the backward solver too).
_IMAGENET_MDEQ = dict(
    **{**_IMAGENET, "color_jitter": 0.0}, min_lr=AUTHORS_MIN_LR,
    **deq_settings(
        **REFERENCE_STOP, solver="broyden", backward_solver="broyden", stop_mode="abs", backward_stop_mode="abs",
        tol=1e-3, backward_tol=1e-3, pretrain_steps=510_000,
    ),
)  # fmt: skip
# The JR files' Jacobian term: JAC_LOSS_WEIGHT applied with probability JAC_LOSS_FREQ, estimated with two probes.
# Their RAND_F_THRES_DELTA (2) jitters F_THRES by U{-2..+1} on those steps only; deq-core's max_iter_jitter draws on
# every step, so the presets keep the limit fixed (the authors' limit on the other 98 % (CIFAR) / 92 % (ImageNet) of
# the steps; docs/fidelity.md).
PAPER: dict[str, dict[str, object]] = {
    # MDEQ paper, CIFAR-10, cifar/cls_mdeq_TINY.yaml: 2 branches (dropout 0.25: the architecture's), NUM_LAYERS 10,
    # F_THRES 18, B_THRES 20, 2 GPUs x 64, 50 epochs, PRETRAIN_STEPS 3000, Adam 1e-3, WD 2.5e-6, AUGMENT False.
    "cifar10-mdeq-tiny": dict(
        **_CIFAR_MDEQ, model="mdeq_tiny_cifar10", augment=False, batch_size=128, weight_decay=2.5e-6,
        **_authors_limits(18, 20), **deq_settings(pretrain_steps=3000, pretrain_depth=10),
        steps=_steps(50, CIFAR_TRAIN, 128),
    ),  # fmt: skip
    # MDEQ paper, CIFAR-10, cifar/cls_mdeq_LARGE.yaml: 4 branches, ~10M parameters (dropout 0.3: the architecture's),
    # NUM_LAYERS 10, F_THRES 18, B_THRES 20, 4 GPUs x 32, 220 epochs, PRETRAIN_STEPS 20,000, Adam 1e-3, WD 0.
    "cifar10-mdeq-large": dict(
        **_CIFAR_MDEQ, model="mdeq_large_cifar10", batch_size=128,
        **_authors_limits(18, 20), **deq_settings(pretrain_steps=20_000, pretrain_depth=10),
        steps=_steps(220, CIFAR_TRAIN, 128),
    ),  # fmt: skip
    # JR paper, CIFAR-10, cifar/cls_mdeq_LARGE_reg.yaml: the same network, DROPOUT 0.22, NUM_LAYERS 8, F_THRES 8,
    # B_THRES 7, 1 GPU x 96, 220 epochs, PRETRAIN_STEPS 16,000, Adam 1e-3, WD 0; JAC_LOSS_WEIGHT 0.4, JAC_LOSS_FREQ
    # 0.02, JAC_STOP_EPOCH 90, PRETRAIN_JAC_LOSS_WEIGHT 0 (no term in pretraining: the skeleton's rule).
    "cifar10-mdeq-large-jr": dict(
        **_CIFAR_MDEQ, model="mdeq_large_cifar10", batch_size=96, dropout=0.22,
        **_authors_limits(8, 7),
        **deq_settings(
            pretrain_steps=16_000, pretrain_depth=8, jac_weight=0.4, jac_prob=0.02, jacobian_samples=JR_PROBES,
            jac_stop=_steps(90, CIFAR_TRAIN, 96),
        ),
        steps=_steps(220, CIFAR_TRAIN, 96),
    ),  # fmt: skip
    # MDEQ paper, imagenet/cls_mdeq_SMALL.yaml: NUM_LAYERS 5, F_THRES 26, B_THRES 27, LR 0.05, WD 5e-5.
    "imagenet-mdeq-small": dict(
        **_IMAGENET_MDEQ, model="mdeq_small_imagenet", lr=0.05, weight_decay=5e-5,
        **_authors_limits(26, 27), **deq_settings(pretrain_depth=5),
    ),  # fmt: skip
    # JR paper, imagenet/cls_mdeq_SMALL_reg.yaml (its head, dropout 0.02 and post-fusion norm: mdeq_small_imagenet_jr):
    # NUM_LAYERS 5, F_THRES 14, B_THRES 14, LR 0.04, WD 2e-5; JAC_LOSS_WEIGHT 2.5 + 0.1 per JAC_INCREMENTAL 50,000
    # steps after pretraining, JAC_LOSS_FREQ 0.08 (PRETRAIN_JAC_LOSS_WEIGHT 0.03: not an option, docs/fidelity.md).
    "imagenet-mdeq-small-jr": dict(
        **_IMAGENET_MDEQ, model="mdeq_small_imagenet_jr", lr=0.04, weight_decay=2e-5,
        **_authors_limits(14, 14),
        **deq_settings(
            pretrain_depth=5, jac_weight=2.5, jac_prob=0.08, jac_growth=0.1, jac_every=50_000,
            jacobian_samples=JR_PROBES,
        ),
    ),  # fmt: skip
    # MDEQ paper, imagenet/cls_mdeq_LARGE.yaml: NUM_LAYERS 4, F_THRES 26, B_THRES 27, LR 0.05, WD 1e-4.
    "imagenet-mdeq-large": dict(
        **_IMAGENET_MDEQ, model="mdeq_large_imagenet", lr=0.05, weight_decay=1e-4,
        **_authors_limits(26, 27), **deq_settings(pretrain_depth=4),
    ),  # fmt: skip
    # JR paper, imagenet/cls_mdeq_LARGE_reg.yaml (no affine after the fusion: mdeq_large_imagenet_jr): NUM_LAYERS 4,
    # F_THRES 14, B_THRES 14, LR 0.05, WD 1e-4; JAC_LOSS_WEIGHT 3.0 + 0.1 per JAC_INCREMENTAL 50,000 steps after
    # pretraining, JAC_LOSS_FREQ 0.08 (PRETRAIN_JAC_LOSS_WEIGHT 0.03: not an option).
    "imagenet-mdeq-large-jr": dict(
        **_IMAGENET_MDEQ, model="mdeq_large_imagenet_jr", lr=0.05, weight_decay=1e-4,
        **_authors_limits(14, 14),
        **deq_settings(
            pretrain_depth=4, jac_weight=3.0, jac_prob=0.08, jac_growth=0.1, jac_every=50_000,
            jacobian_samples=JR_PROBES,
        ),
    ),  # fmt: skip
    "cifar10-resnet18": dict(
        dataset="cifar10", model="resnet18", batch_size=128, opt="sgd", lr=0.1, weight_decay=5e-4,
        steps=_steps(200, CIFAR_TRAIN, 128), eval_every=2000, log_every=100, save_every=2000,
    ),
    "cifar10-resnet101": dict(
        dataset="cifar10", model="resnet101", batch_size=128, opt="sgd", lr=0.1, weight_decay=5e-4,
        steps=_steps(200, CIFAR_TRAIN, 128), eval_every=2000, log_every=100, save_every=2000,
    ),
    "imagenet-resnet18": dict(**{**_IMAGENET, "steps": _steps(90, IMAGENET_TRAIN, 128)}, model="resnet18", lr=0.05,
                              weight_decay=1e-4),
    "imagenet-resnet101": dict(**{**_IMAGENET, "steps": _steps(90, IMAGENET_TRAIN, 128)}, model="resnet101", lr=0.05,
                               weight_decay=1e-4),
}  # fmt: skip

# CPU-scale result: 16x16 digits, one budget (400 steps of 64 images, Adam 2e-3 with cosine decay) for all three.
_DIGITS = dict(
    dataset="digits",
    image_size=16,
    scale_min=0.6,
    hflip=0.0,
    steps=400,
    batch_size=64,
    opt="adam",
    lr=2e-3,
    warmup_steps=20,
    sched="cosine",
    min_lr=1e-5,
    eval_every=100,
    log_every=20,
    save_every=200,
)
# The CPU-scale MDEQ's solver settings (digits and glyphs): Broyden both ways, 12 / 12 iterations to 1e-3 in
# training, inference to 1e-3 with a limit of 30, pretraining unrolled 4 deep.
_MINI_MDEQ = dict(
    model="mdeq_mini",
    **deq_settings(
        solver="broyden", backward_solver="broyden", max_iter=12, backward_max_iter=12, tol=1e-3, backward_tol=1e-3,
        eval_max_iter=30, pretrain_depth=4,
    ),
)  # fmt: skip
_DIGITS_MDEQ = dict(_DIGITS, **_MINI_MDEQ, **deq_settings(pretrain_steps=100))
CPU: dict[str, dict[str, object]] = {
    "digits-mdeq": _DIGITS_MDEQ,
    "digits-mdeq-jr": dict(_DIGITS_MDEQ, **deq_settings(jac_weight=1.0, jac_prob=0.5)),
    "digits-resnet": dict(_DIGITS, model="resnet_mini"),
}

# Claims of the JR paper at CPU scale (python -m lab.vision): 16x16 glyphs (python -m deq_vision.data glyphs), one
# budget for all three models. The JR paper's appendix (its CIFAR-10 gamma, p and limits) is not in the text we cite
# from, so the JR settings follow what the text does state: gamma from Table 3's rows (0.1, 0.6, 1.2; 0.6 is its best
# at every hard stop), the loss applied stochastically with a probability p (Section 5), and inference at a hard stop
# of 6 NFE (Table 2, "MDEQ + JR (ours)": 6 NFEs); the unregularized MDEQ solves to its tolerance (limit 30).
# Our max_iter counts every call of f, the one at z0 included, so max_iter 6 is the paper's NFE 5 (its NFE counts
# Broyden updates after z0); the claims evaluate the JR models at max_iter 7 = the paper's 6 NFE as well
# (deq_vision.evaluate.paper_nfe).
GLYPHS_STEPS = 3000
_GLYPHS = dict(
    dataset="glyphs",
    image_size=16,
    scale_min=0.7,
    hflip=0.0,
    steps=GLYPHS_STEPS,
    batch_size=64,
    opt="adam",
    lr=2e-3,
    warmup_steps=50,
    sched="cosine",
    min_lr=1e-5,
    eval_every=GLYPHS_STEPS // 5,
    log_every=20,
    save_every=GLYPHS_STEPS // 10,
    keep_checkpoints=11,  # every tenth of training: the forward-residual-over-training figure (JR paper Fig. 1a)
)
# The claims' MDEQs stop as the authors' solvers do (one residual over the batch) and estimate the Jacobian term with
# their two probes.
_GLYPHS_MDEQ = dict(_GLYPHS, **_MINI_MDEQ, **deq_settings(**REFERENCE_STOP, pretrain_steps=GLYPHS_STEPS // 15))
CPU.update(
    {
        "glyphs-mdeq": _GLYPHS_MDEQ,
        "glyphs-mdeq-jr": dict(
            _GLYPHS_MDEQ,
            **deq_settings(max_iter=6, backward_max_iter=6, eval_max_iter=6, jac_weight=0.6, jac_prob=0.5),
            **deq_settings(jacobian_samples=JR_PROBES),
        ),  # fmt: skip
        "glyphs-resnet": dict(_GLYPHS, model="resnet_mini"),
    }
)

# Tests: a tiny CIFAR-format folder at 16x16, a handful of steps.
_TINY = dict(
    dataset="cifar10",
    image_size=16,
    steps=4,
    batch_size=8,
    opt="adam",
    lr=3e-3,
    sched="cosine",
    eval_every=2,
    log_every=1,
    save_every=2,
    eval_limit=16,
    augment=False,
)
_TINY_MDEQ = dict(
    _TINY, model="mdeq_mini",
    **deq_settings(max_iter=6, backward_max_iter=6, tol=1e-3, backward_tol=1e-3, pretrain_steps=1, pretrain_depth=2),
)  # fmt: skip
CPU.update(
    {
        "tiny-mdeq": _TINY_MDEQ,
        "tiny-mdeq-jr": dict(_TINY_MDEQ, **deq_settings(jac_weight=1.0, jac_prob=1.0)),
        "tiny-resnet": dict(_TINY, model="resnet_mini"),
    }
)

PRESETS: dict[str, Config] = {name: replace_config(Config(), values) for name, values in {**PAPER, **CPU}.items()}


def get_config(name: str) -> Config:
    """The preset ``name``; ValueError listing the valid names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown config {name!r}; valid configs: {', '.join(sorted(PRESETS))}.")
    return PRESETS[name]
