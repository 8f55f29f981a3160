"""Loaders: a tiny CIFAR-format folder and a tiny ImageFolder written here; missing and malformed data raise
DatasetError saying where the files go."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import learnable_images
from deq_core.train.run_config import replace_config
from deq_vision.configs import PRESETS
from deq_vision.data import CIFAR10, DatasetError, build_datasets, image_folder, write_cifar_folder


def test_cifar_loader_reads_a_tiny_cifar_folder(cifar_dir: Path) -> None:
    images, labels = learnable_images(96)
    train, test = CIFAR10(cifar_dir, train=True), CIFAR10(cifar_dir, train=False)
    assert len(train) == 80 and len(test) == 16
    image, label = train[3]
    assert image.size == (32, 32) and image.mode == "RGB"
    assert np.array_equal(np.asarray(image), images[3]) and label == labels[3]
    image, label = test[0]
    assert np.array_equal(np.asarray(image), images[80]) and label == labels[80]


def test_build_datasets_applies_timm_transforms(cifar_dir: Path) -> None:
    cfg = replace_config(PRESETS["tiny-mdeq"], {"augment": True, "eval_limit": 5})
    train, held_out = build_datasets(cfg, cifar_dir)
    x, y = train[0]
    assert isinstance(x, torch.Tensor) and x.shape == (3, 16, 16) and isinstance(y, int)
    assert len(held_out) == 5 and held_out[0][0].shape == (3, 16, 16)


def test_missing_cifar_raises_the_documented_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cifar-10-batches-py") as err:
        CIFAR10(tmp_path, train=True)
    assert "--download" in str(err.value)
    with pytest.raises(DatasetError, match="needs --data-dir"):
        build_datasets(PRESETS["tiny-mdeq"], None)


def test_malformed_cifar_batches_raise(tmp_path: Path) -> None:
    images, labels = learnable_images(12)
    folder = write_cifar_folder(tmp_path, images, labels)
    (folder / "data_batch_2").write_bytes(b"not a pickle")
    with pytest.raises(DatasetError, match="data_batch_2"):
        CIFAR10(tmp_path, train=True)
    with (folder / "test_batch").open("wb") as fh:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, fh)
    with pytest.raises(DatasetError, match="3072"):
        CIFAR10(tmp_path, train=False)


def test_image_folder_loader_reads_a_tiny_folder(image_folder_dir: Path) -> None:
    train = image_folder(image_folder_dir, "train")
    val = image_folder(image_folder_dir, "val")
    assert len(train) == 12 and len(val) == 6 and train.classes == ["ant", "bee", "cat"]
    cfg = replace_config(PRESETS["imagenet-mdeq-small"], {"image_size": 32, "num_classes": 3})  # an ImageNet subset
    train_set, val_set = build_datasets(cfg, image_folder_dir)
    x, y = val_set[5]
    assert x.shape == (3, 32, 32) and y == 2


def test_missing_image_folder_raises_the_documented_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="train/<class>"):
        image_folder(tmp_path, "train")
    (tmp_path / "val").mkdir()
    with pytest.raises(DatasetError, match="no class folders"):
        image_folder(tmp_path, "val")


def test_digits_split_is_stratified_and_fixed() -> None:
    from deq_vision.data import Digits

    train, test = Digits(train=True), Digits(train=False)
    assert len(train) + len(test) == 1797 and 350 <= len(test) <= 370
    assert set(np.unique(test.targets)) == set(range(10))
    assert np.array_equal(Digits(train=False).targets, test.targets)
