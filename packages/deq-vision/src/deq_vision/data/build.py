"""Datasets of a run with timm's transforms: ``build_datasets(cfg, data_dir)`` -> (train, eval), checked before
training: class counts against the model's head, image files readable, limits as class-balanced subsets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from timm.data import DEFAULT_CROP_PCT, create_transform
from torch.utils.data import Dataset, Subset

from deq_core.train.run_config import replace_config

from ..configs import Config
from ..configs.config import IMAGE_FOLDERS, NUM_CLASSES
from .cifar import CIFAR10
from .digits import Digits
from .errors import DatasetError
from .glyphs import Glyphs
from .imagefolder import check_image_files, class_folders, image_folder

# The subsets of train_limit / eval_limit / evaluate --limit are drawn with this seed: the same images in every run.
SUBSET_SEED = 0

# Per-channel mean / std of the inputs.
NORMALIZATION = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "folder": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "digits": ((0.5,), (0.5,)),
    "glyphs": ((0.5,), (0.5,)),
}


def build_transform(cfg: Config, training: bool) -> Callable[[Any], Any]:
    """timm's ``create_transform`` for the config: PIL image -> normalized tensor (in_chans, S, S), S = image_size.

    Training with ``data.augment``: random resized crop (area fraction in [data.scale_min, 1]), flips, optional
    color jitter and AutoAugment / RandAugment. Evaluation (and training without ``augment``): resize and center crop
    (crop_pct 1 for the small datasets, timm's default 0.875 for image folders).
    """
    data = cfg.data
    mean, std = NORMALIZATION[data.dataset]
    crop_pct = None if data.dataset in IMAGE_FOLDERS else 1.0
    if training and data.augment:
        return create_transform(
            data.image_size, is_training=True, scale=(data.scale_min, 1.0), hflip=data.hflip,
            color_jitter=data.color_jitter, auto_augment=data.auto_augment, mean=mean, std=std,
        )  # fmt: skip
    return create_transform(data.image_size, is_training=False, crop_pct=crop_pct, mean=mean, std=std)


def data_config(cfg: Config) -> dict[str, Any]:
    """The run's eval preprocessing (:func:`build_transform` with ``training=False``) in the terms of timm's
    ``pretrained_cfg``: ``input_size`` (in_chans, S, S), per-channel ``mean`` / ``std``, center ``crop_pct`` (1 for the
    small datasets, timm's default for image folders), bilinear ``interpolation``."""
    mean, std = NORMALIZATION[cfg.data.dataset]
    size = cfg.data.image_size
    crop_pct = DEFAULT_CROP_PCT if cfg.data.dataset in IMAGE_FOLDERS else 1.0
    return dict(
        input_size=(cfg.in_chans, size, size), mean=mean, std=std, crop_pct=crop_pct, crop_mode="center",
        interpolation="bilinear",
    )  # fmt: skip


def balanced_subset(labels: Sequence[int] | np.ndarray, limit: int, seed: int = SUBSET_SEED) -> np.ndarray:
    """Sorted indices of ``limit`` items drawn at random (``seed``) with the classes as equal as the data allows.

    Classes take turns in a random order, each giving its next random item, until ``limit`` items are taken (a
    class that runs out drops out), so every class gets ``limit // K`` or one more when it has that many. Returns
    every index when ``limit`` <= 0 or >= len(labels).
    """
    labels = np.asarray(labels)
    if limit <= 0 or limit >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])  # each class's indices
    members = [rng.permutation(by_class[k]) for k in rng.permutation(len(by_class))]
    rank = np.concatenate([np.arange(len(m)) for m in members])  # position of the item in its class's turn order
    turn = np.concatenate([np.full(len(m), k) for k, m in enumerate(members)])  # the class's place in each round
    order = np.lexsort((turn, rank))
    return np.sort(np.concatenate(members)[order[:limit]])


def _limit(dataset: Any, limit: int) -> Dataset:
    """``dataset`` itself (limit 0) or the class-balanced random subset of ``limit`` items (:func:`balanced_subset`)."""
    if limit <= 0 or limit >= len(dataset):
        return dataset
    return Subset(dataset, balanced_subset(dataset.targets, limit).tolist())


def check_classes(cfg: Config, found: int, where: str) -> None:
    """Raise DatasetError unless the data's ``found`` classes match the head of the model (``data.num_classes``).

    Nothing to check for ``dataset=folder`` before its ``num_classes`` is set (see :func:`resolve_num_classes`).
    """
    data = cfg.data
    expected = data.num_classes or NUM_CLASSES.get(data.dataset, 0)
    if expected and found != expected:
        hint = f"set data.num_classes={found}" + (" or use data.dataset=folder" if data.dataset == "imagenet" else "")
        raise DatasetError(
            f"{where} has {found} classes but the model's head has {expected} outputs (data.dataset={data.dataset}, "
            f"data.num_classes={data.num_classes or 'default'}): {hint}."
        )


def resolve_num_classes(cfg: Config, data_dir: str | Path | None) -> Config:
    """``cfg`` with ``data.num_classes`` set from the class folders of DATA_DIR/train for ``data.dataset=folder``
    (when 0), checked against them for every image-folder dataset; other datasets are returned unchanged.

    Raises:
        DatasetError: missing train/ folder, or a class count that differs from the model's head.
    """
    if cfg.data.dataset not in IMAGE_FOLDERS or data_dir is None:
        return cfg
    found = len(class_folders(data_dir, "train"))
    if cfg.data.dataset == "folder" and cfg.data.num_classes == 0:
        return replace_config(cfg, {"data.num_classes": found})
    check_classes(cfg, found, str(Path(data_dir) / "train"))
    return cfg


def _image_folders(
    cfg: Config, data_dir: str | Path, train_tf: Callable[[Any], Any], eval_tf: Callable[[Any], Any]
) -> tuple[Dataset, Dataset]:
    """train/ and val/ of an image-folder dataset (val with the training classes' indices), limited, their selected
    files' headers checked."""
    train = image_folder(data_dir, "train", train_tf)
    held_out = image_folder(data_dir, "val", eval_tf, class_to_idx=train.class_to_idx)
    check_classes(cfg, len(train.classes), str(Path(data_dir) / "train"))
    limited = _limit(train, cfg.data.train_limit), _limit(held_out, cfg.data.eval_limit)
    for full, part in zip((train, held_out), limited):
        chosen = part.indices if isinstance(part, Subset) else range(len(full))
        check_image_files([full.samples[i][0] for i in chosen])
    return limited


def build_datasets(cfg: Config, data_dir: str | Path | None, download: bool = False) -> tuple[Dataset, Dataset]:
    """(training set, evaluation set) with transforms; items (tensor (C, S, S), int label).

    Args:
        cfg: the run's config (its ``data`` section: dataset, image_size, augmentation, train_limit / eval_limit:
            class-balanced random subsets, the same in every run).
        data_dir: CIFAR-10: the folder containing ``cifar-10-batches-py``; imagenet / folder: the folder with
            ``train/`` and ``val/``; glyphs: the folder with ``train.npz`` / ``test.npz``;
            digits: unused (scikit-learn ships the data).
        download: CIFAR-10 only: download through torchvision first (network needed).

    Raises:
        DatasetError: missing or malformed data (layout, unreadable image files, validation classes unknown to
            training, a class count that differs from the model's head), with what to do in the message.
    """
    train_tf, eval_tf = build_transform(cfg, True), build_transform(cfg, False)
    dataset = cfg.data.dataset
    if dataset == "digits":
        train: Dataset = Digits(train=True, transform=train_tf)
        held_out: Dataset = Digits(train=False, transform=eval_tf)
    else:
        if data_dir is None:
            where = {
                "cifar10": "the folder containing cifar-10-batches-py",
                "glyphs": "train.npz / test.npz from python -m deq_vision.data glyphs --output-dir DIR",
            }.get(dataset, "train/ and val/")
            raise DatasetError(f"dataset {dataset!r} needs --data-dir ({where}).")
        if dataset == "glyphs":
            train = Glyphs(data_dir, train=True, transform=train_tf)
            held_out = Glyphs(data_dir, train=False, transform=eval_tf)
        elif dataset == "cifar10":
            train = CIFAR10(data_dir, train=True, transform=train_tf, download=download)
            held_out = CIFAR10(data_dir, train=False, transform=eval_tf)
        else:
            if download:
                raise DatasetError(f"dataset {dataset!r} cannot be downloaded; put train/ and val/ in --data-dir.")
            return _image_folders(cfg, data_dir, train_tf, eval_tf)
    if len(train) == 0 or len(held_out) == 0:  # type: ignore[arg-type]
        raise DatasetError(f"dataset {dataset!r} under {data_dir} has an empty split.")
    return _limit(train, cfg.data.train_limit), _limit(held_out, cfg.data.eval_limit)
