"""One frozen dataclass holds every setting of a run: data, model, DEQ solver, DEQ training features, optimizer.

Change a preset on the command line with ``key=value`` (``deq_core.train.overrides.apply_overrides``); every value is
checked here, in ``__post_init__``, with a message that names the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_at_least, check_choice, check_fraction, check_training
from deq_core.train.deq_config import DEQConfig, deq_section

DatasetName = Literal["cifar10", "imagenet", "folder", "digits", "glyphs"]
# Classes of each dataset by default ("folder": as many as DATA_DIR/train has class folders).
NUM_CLASSES = {"cifar10": 10, "imagenet": 1000, "digits": 10, "glyphs": 10}
IN_CHANS = {"cifar10": 3, "imagenet": 3, "folder": 3, "digits": 1, "glyphs": 1}
IMAGE_FOLDERS = ("imagenet", "folder")  # datasets read from DATA_DIR/train/<class>/ and DATA_DIR/val/<class>/


@dataclass(frozen=True)
class Config:
    """Settings of a run. Sizes in pixels, lengths in optimizer steps.

    Data:
        dataset: "cifar10" (DATA_DIR/cifar-10-batches-py), "imagenet" (DATA_DIR/train, DATA_DIR/val ImageFolders
        of 1000 classes), "folder" (the same layout, any number of classes), "digits" (scikit-learn's 8x8 digits,
        offline) or "glyphs" (procedurally drawn digits written by ``python -m deq_vision.data glyphs --output-dir
        DATA_DIR``, offline). num_classes: outputs of the classifier (0: the dataset's: 10, 1000, or for "folder"
        the number of class folders in DATA_DIR/train, set when training starts); checked against the data.
        image_size: network input side (digits are upsampled).
        train_limit, eval_limit: use only N images of a split (0: all), a class-balanced random subset that is the
        same in every run (for quick runs and tests).
        num_workers: DataLoader workers.
    Augmentation (timm's create_transform; Mixup/CutMix from timm.data.Mixup):
        augment: random resized crop + flips + color jitter in training (False: resize only). scale_min: lower
        bound of the crop's area fraction. hflip: horizontal flip probability. color_jitter, auto_augment (e.g.
        "rand-m9-mstd0.5"; None: off). mixup, cutmix: alphas (0: off). label_smoothing.
    Model:
        model: a timm name (``mdeq_*`` registered by deq_vision, or e.g. "resnet18"). dropout: variational dropout
        of the MDEQ blocks (None: the architecture's default). drop_rate: dropout before the classifier.
    DEQ (``deq``, a :class:`deq_core.train.deq_config.DEQConfig`; ``deq.max_iter=12`` on the command line; MDEQs
        only): the solvers, limits, backward mode ("implicit", "phantom", "jfb"), evaluation limits, jittered
        training limit, unrolled pretraining and Jacobian regularization (``deq.jac_stop``: the JR paper's CIFAR run
        stops it after epoch 90); it builds the MDEQ's layer (``cfg.deq.layer()``). Defaults here: Broyden both ways,
        limits 18 / 20, tol 1e-3 / 1e-3.
    Training:
        steps: optimizer steps. batch_size: global batch (over processes and accumulation). grad_accum.
        opt: timm optimizer name ("adam", "sgd", "adamw", ...). lr, weight_decay, momentum (sgd).
        sched: timm scheduler name ("cosine", "step", ...), over steps. warmup_steps, warmup_lr, min_lr.
        grad_clip (0: off). mixed_precision ("no", "fp16", "bf16"). ema_decay (0: no model EMA; else timm's
        ModelEmaV3, evaluated alongside). eval_every, log_every, save_every (0: only at the end),
        keep_checkpoints. seed. stop_after: stop after this step as if interrupted (0: never; for resume tests).
    """

    dataset: DatasetName = "cifar10"
    num_classes: int = 0
    image_size: int = 32
    train_limit: int = 0
    eval_limit: int = 0
    num_workers: int = 0

    augment: bool = True
    scale_min: float = 0.35
    hflip: float = 0.5
    color_jitter: float = 0.0
    auto_augment: str | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    label_smoothing: float = 0.0

    model: str = "mdeq_tiny_cifar10"
    dropout: float | None = None
    drop_rate: float = 0.0

    deq: DEQConfig = deq_section(
        solver="broyden", max_iter=18, tol=1e-3, backward_solver="broyden", backward_max_iter=20, backward_tol=1e-3
    )

    steps: int = 1000
    batch_size: int = 128
    grad_accum: int = 1
    opt: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    sched: str = "cosine"
    warmup_steps: int = 0
    warmup_lr: float = 1e-5
    min_lr: float = 0.0
    grad_clip: float = 0.0
    mixed_precision: Literal["no", "fp16", "bf16"] = "no"
    ema_decay: float = 0.0
    eval_every: int = 1000
    log_every: int = 50
    save_every: int = 0
    keep_checkpoints: int = 2
    seed: int = 0
    stop_after: int = 0

    def __post_init__(self) -> None:
        check_config(self)

    @property
    def is_deq(self) -> bool:
        return self.model.startswith("mdeq_")

    @property
    def head_classes(self) -> int:
        """Outputs of the classifier: ``num_classes``, or the dataset's class count when it is 0.

        Raises:
            ValueError: ``dataset="folder"`` with ``num_classes`` 0 (``deq_vision.data.resolve_num_classes`` sets it
                from the folder, as training does).
        """
        if self.num_classes:
            return self.num_classes
        if self.dataset not in NUM_CLASSES:
            raise ValueError(f"dataset={self.dataset} needs num_classes (training sets it from DATA_DIR/train).")
        return NUM_CLASSES[self.dataset]

    @property
    def in_chans(self) -> int:
        return IN_CHANS[self.dataset]

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def check_config(cfg: Config) -> None:
    """Raise ValueError naming the key and the valid values for any setting out of range."""
    check_training(cfg)  # optimizer steps, batch, periods, learning rate (the deq section checks itself)
    check_choice(cfg, "dataset")
    check_at_least(cfg, 1, "image_size")
    check_at_least(cfg, 0, "train_limit", "eval_limit", "num_workers", "mixup", "cutmix", "drop_rate", "momentum")
    check_at_least(cfg, 0, "num_classes", "warmup_lr", "min_lr")
    check_fraction(cfg, "scale_min", "hflip", "label_smoothing", "ema_decay")
    check_fraction(cfg, "drop_rate", closed=False)
    if cfg.dropout is not None and not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1) or None, got {cfg.dropout}.")
    fixed = NUM_CLASSES.get(cfg.dataset) if cfg.dataset not in IMAGE_FOLDERS else None
    if fixed is not None and cfg.num_classes not in (0, fixed):
        raise ValueError(f"dataset={cfg.dataset} has {fixed} classes: num_classes must be 0 or {fixed}, got "
                         f"{cfg.num_classes}.")  # fmt: skip
    if not cfg.model.strip():
        raise ValueError("model must be a timm model name, e.g. mdeq_tiny_cifar10 or resnet18.")
