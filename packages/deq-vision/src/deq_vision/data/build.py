"""Datasets of a run with timm's transforms: ``build_datasets(cfg, data_dir)`` -> (train, eval)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from timm.data import create_transform
from torch.utils.data import Dataset, Subset

from ..configs import Config
from .cifar import CIFAR10
from .digits import Digits
from .errors import DatasetError
from .glyphs import Glyphs
from .imagefolder import image_folder

# Per-channel mean / std of the inputs.
NORMALIZATION = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "digits": ((0.5,), (0.5,)),
    "glyphs": ((0.5,), (0.5,)),
}


def build_transform(cfg: Config, training: bool) -> Callable[[Any], Any]:
    """timm's ``create_transform`` for the config: PIL image -> normalized tensor (in_chans, S, S), S = image_size.

    Training with ``augment``: random resized crop (area fraction in [scale_min, 1]), flips, optional color jitter
    and AutoAugment / RandAugment. Evaluation (and training without ``augment``): resize and center crop (crop_pct 1
    for the small datasets, timm's default 0.875 for ImageNet).
    """
    mean, std = NORMALIZATION[cfg.dataset]
    crop_pct = None if cfg.dataset == "imagenet" else 1.0
    if training and cfg.augment:
        return create_transform(
            cfg.image_size, is_training=True, scale=(cfg.scale_min, 1.0), hflip=cfg.hflip,
            color_jitter=cfg.color_jitter, auto_augment=cfg.auto_augment, mean=mean, std=std,
        )  # fmt: skip
    return create_transform(cfg.image_size, is_training=False, crop_pct=crop_pct, mean=mean, std=std)


def _limit(dataset: Dataset, limit: int) -> Dataset:
    return Subset(dataset, range(min(limit, len(dataset)))) if limit > 0 else dataset  # type: ignore[arg-type]


def build_datasets(cfg: Config, data_dir: str | Path | None, download: bool = False) -> tuple[Dataset, Dataset]:
    """(training set, evaluation set) with transforms; items (tensor (C, S, S), int label).

    Args:
        cfg: the run's config (dataset, image_size, augmentation, train_limit / eval_limit).
        data_dir: CIFAR-10: the folder containing ``cifar-10-batches-py``; ImageNet: the folder with ``train/`` and
            ``val/``; glyphs: the folder with ``train.npz`` / ``test.npz``; digits: unused (scikit-learn ships
            the data).
        download: CIFAR-10 only: download through torchvision first (network needed).

    Raises:
        DatasetError: missing or malformed data, with the expected layout in the message.
    """
    train_tf, eval_tf = build_transform(cfg, True), build_transform(cfg, False)
    if cfg.dataset == "digits":
        train: Dataset = Digits(train=True, transform=train_tf)
        held_out: Dataset = Digits(train=False, transform=eval_tf)
    else:
        if data_dir is None:
            where = {"cifar10": "the folder containing cifar-10-batches-py", "imagenet": "train/ and val/"}.get(
                cfg.dataset, "train.npz / test.npz from python -m deq_vision.data glyphs --output-dir DIR"
            )
            raise DatasetError(f"dataset {cfg.dataset!r} needs --data-dir ({where}).")
        if cfg.dataset == "glyphs":
            train = Glyphs(data_dir, train=True, transform=train_tf)
            held_out = Glyphs(data_dir, train=False, transform=eval_tf)
        elif cfg.dataset == "cifar10":
            train = CIFAR10(data_dir, train=True, transform=train_tf, download=download)
            held_out = CIFAR10(data_dir, train=False, transform=eval_tf)
        else:
            if download:
                raise DatasetError("ImageNet cannot be downloaded automatically; put train/ and val/ in --data-dir.")
            train = image_folder(data_dir, "train", train_tf)
            held_out = image_folder(data_dir, "val", eval_tf)
    if len(train) == 0 or len(held_out) == 0:  # type: ignore[arg-type]
        raise DatasetError(f"dataset {cfg.dataset!r} under {data_dir} has an empty split.")
    return _limit(train, cfg.train_limit), _limit(held_out, cfg.eval_limit)
