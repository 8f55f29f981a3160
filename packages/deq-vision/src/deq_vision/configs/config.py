"""One frozen dataclass of sections holds every setting of a run: ``data`` (:class:`DataConfig`), ``model``
(:class:`ModelConfig`), ``deq`` (deq-core's ``DEQConfig``), ``optim`` (:class:`VisionOptimConfig`) and ``run``
(deq-core's ``RunConfig``).

A setting's name is its dotted path, ``optim.lr``; no name is in two sections, so the short name works too (``lr``,
``deq_core.train.run_config.resolve_key``), and ``model=resnet18`` sets ``model.name``. Change a preset on the command
line with ``key=value`` (``deq_core.train.overrides.apply_overrides``); each section checks its values when built, in
``__post_init__``, with a message that names the dotted key and the valid values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from deq_core.train.checks import check_at_least, check_choice, check_finite, check_fraction, in_section
from deq_core.train.deq_config import DEQConfig, deq_section
from deq_core.train.sections import OptimConfig, RunConfig, section

from ..models import is_deq_model

DatasetName = Literal["cifar10", "imagenet", "folder", "digits", "glyphs"]
# Classes of each dataset by default ("folder": as many as DATA_DIR/train has class folders).
NUM_CLASSES = {"cifar10": 10, "imagenet": 1000, "digits": 10, "glyphs": 10}
IN_CHANS = {"cifar10": 3, "imagenet": 3, "folder": 3, "digits": 1, "glyphs": 1}
IMAGE_FOLDERS = ("imagenet", "folder")  # datasets read from DATA_DIR/train/<class>/ and DATA_DIR/val/<class>/


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` section: what the model sees. Sizes in pixels.

    dataset: "cifar10" (DATA_DIR/cifar-10-batches-py), "imagenet" (DATA_DIR/train, DATA_DIR/val ImageFolders of 1000
    classes), "folder" (the same layout, any number of classes), "digits" (scikit-learn's 8x8 digits, offline) or
    "glyphs" (procedurally drawn digits written by ``python -m deq_vision.data glyphs --output-dir DATA_DIR``,
    offline). num_classes: outputs of the classifier (0: the dataset's: 10, 1000, or for "folder" the number of class
    folders in DATA_DIR/train, set when training starts); checked against the data. image_size: network input side
    (digits are upsampled). train_limit, eval_limit: use only N images of a split (0: all), a class-balanced random
    subset that is the same in every run (for quick runs and tests). num_workers: DataLoader workers.

    Augmentation (timm's create_transform; Mixup / CutMix from timm.data.Mixup): augment: random resized crop +
    flips + color jitter in training (False: resize only). scale_min: lower bound of the crop's area fraction.
    hflip: horizontal flip probability. color_jitter, auto_augment (e.g. "rand-m9-mstd0.5"; None: off). mixup,
    cutmix: alphas (0: off). label_smoothing: of the training targets (with Mixup / CutMix: of the mixed ones).
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

    def __post_init__(self) -> None:
        with in_section("data"):
            _check_data(self)


MAX_WORKERS = 256  # data.num_workers: DataLoader worker processes (data.num_workers=100000 started processes
# until the machine choked, as a typo)


def _check_data(data: DataConfig) -> None:
    check_finite(data)
    check_choice(data, "dataset")
    check_at_least(data, 1, "image_size")
    check_at_least(data, 0, "num_classes", "train_limit", "eval_limit", "num_workers")
    if data.num_workers > MAX_WORKERS:
        raise ValueError(
            f"num_workers must be at most {MAX_WORKERS}, got {data.num_workers}: each worker is a process of its own "
            "(more than the machine's cores only waits); 0 loads in the training process."
        )
    check_at_least(data, 0, "color_jitter", "mixup", "cutmix")
    check_fraction(data, "scale_min", "hflip", "label_smoothing")
    fixed = NUM_CLASSES.get(data.dataset) if data.dataset not in IMAGE_FOLDERS else None
    if fixed is not None and data.num_classes not in (0, fixed):
        raise ValueError(f"num_classes must be 0 or {fixed} (dataset={data.dataset} has {fixed} classes), got "
                         f"{data.num_classes}.")  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """The ``model`` section: name: a timm name (``mdeq_*`` registered by deq_vision, or e.g. "resnet18"; ``model=NAME``
    on the command line). dropout: variational dropout of the MDEQ blocks (None: the architecture's default; MDEQs
    only). drop_rate: dropout before the classifier. (An MDEQ's solver settings are the ``deq`` section.)"""

    name: str = "mdeq_tiny_cifar10"
    dropout: float | None = None
    drop_rate: float = 0.0

    def __post_init__(self) -> None:
        with in_section("model"):
            _check_model(self)


def _check_model(model: ModelConfig) -> None:
    check_finite(model)
    if not isinstance(model.name, str) or not model.name.strip():
        raise ValueError(f"name must be a timm model name, e.g. mdeq_tiny_cifar10 or resnet18, got {model.name!r}.")
    check_at_least(model, 0, "drop_rate")
    check_fraction(model, "drop_rate", closed=False)
    if model.dropout is not None and not 0.0 <= model.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1) or None, got {model.dropout}.")


@dataclass(frozen=True)
class VisionOptimConfig(OptimConfig):
    """The ``optim`` section: deq-core's ``OptimConfig`` (batch_size: the global batch over processes and
    accumulation; grad_accum; lr; weight_decay; grad_clip, 0: off) and the schedule, lengths in optimizer steps.

    steps: optimizer steps. opt: timm optimizer name ("adam", "sgd", "adamw", ...); momentum (sgd). sched: timm
    scheduler name ("cosine", "step", ...), over steps; warmup_steps, warmup_lr, min_lr. ema_decay: 0: no model EMA;
    else timm's ModelEmaV3 of the weights, evaluated alongside (split "eval_ema").
    """

    steps: int = 1000
    opt: str = "adam"
    momentum: float = 0.9
    sched: str = "cosine"
    warmup_steps: int = 0
    warmup_lr: float = 1e-5
    min_lr: float = 0.0
    ema_decay: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("optim"):
            _check_optim(self)


def _check_optim(optim: VisionOptimConfig) -> None:
    check_finite(optim)
    check_at_least(optim, 1, "steps")
    check_at_least(optim, 0, "warmup_steps", "momentum", "warmup_lr", "min_lr")
    check_fraction(optim, "ema_decay")


@dataclass(frozen=True)
class Config:
    """Settings of a run, in sections (each checked when built; the keys of each in its class's docstring):

    data (:class:`DataConfig`): dataset, classes, image size, limits, workers, augmentation, Mixup / CutMix, label
        smoothing.
    model (:class:`ModelConfig`): the timm name, block dropout, classifier dropout.
    deq (deq-core's ``DEQConfig``; MDEQs only): the solvers, limits, backward mode ("implicit", "phantom", "jfb"),
        evaluation limits, jittered training limit, unrolled pretraining and Jacobian regularization (``deq.jac_stop``:
        the JR paper's CIFAR run stops it after epoch 90); it builds the MDEQ's layer (``cfg.deq.layer()``). Defaults
        here: Broyden both ways, limits 18 / 20, tol 1e-3 / 1e-3.
    optim (:class:`VisionOptimConfig`): batch, accumulation, optimizer, learning rate and its schedule, weight decay,
        clipping, model EMA. Defaults here: batch 128, 1000 steps of Adam 1e-3 with cosine decay.
    run (deq-core's ``RunConfig``): seed, mixed precision, logging / evaluation / checkpoint periods, ``stop_after``.
        Defaults here: log every 50 steps, evaluate every 1000.
    """

    data: DataConfig = section(DataConfig)
    model: ModelConfig = section(ModelConfig)
    deq: DEQConfig = deq_section(
        solver="broyden", max_iter=18, tol=1e-3, backward_solver="broyden", backward_max_iter=20, backward_tol=1e-3
    )
    optim: VisionOptimConfig = section(VisionOptimConfig, batch_size=128)
    run: RunConfig = section(RunConfig, eval_every=1000, log_every=50)

    @property
    def is_deq(self) -> bool:
        """Whether ``model.name`` is a DEQ (:func:`deq_vision.models.is_deq_model`)."""
        return is_deq_model(self.model.name)

    @property
    def head_classes(self) -> int:
        """Outputs of the classifier: ``data.num_classes``, or the dataset's class count when it is 0.

        Raises:
            ValueError: ``data.dataset="folder"`` with ``data.num_classes`` 0 (``deq_vision.data.resolve_num_classes``
                sets it from the folder, as training does).
        """
        data = self.data
        if data.num_classes:
            return data.num_classes
        if data.dataset not in NUM_CLASSES:
            raise ValueError(f"dataset={data.dataset} needs data.num_classes (training sets it from DATA_DIR/train).")
        return NUM_CLASSES[data.dataset]

    @property
    def in_chans(self) -> int:
        return IN_CHANS[self.data.dataset]

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)
