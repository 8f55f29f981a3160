"""Shared fixtures: tiny datasets written by the tests themselves, and one torch thread (faster than two on a busy
2-core machine, where OpenMP threads wait on each other)."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from PIL import Image

from deq_vision.data import write_cifar_folder


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"  # the commit name of offline_hub's one snapshot


def learnable_images(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 32, 32, 3) uint8, labels (n,)): noise plus a label-dependent brightness, so a model can learn."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    noise = rng.integers(0, 64, (n, 32, 32, 3))
    images = (noise + labels[:, None, None, None] * 20).astype(np.uint8)
    return images, labels


@pytest.fixture
def cifar_dir(tmp_path: Path) -> Path:
    """A CIFAR-format folder (cifar-10-batches-py with five training batches and a test batch), 96 images."""
    images, labels = learnable_images(96)
    write_cifar_folder(tmp_path / "cifar", images, labels)
    return tmp_path / "cifar"


@pytest.fixture
def image_folder_dir(tmp_path: Path) -> Path:
    """train/ and val/ ImageFolders with three classes of small PNGs."""
    rng = np.random.default_rng(1)
    root = tmp_path / "imagenet"
    for split, count in (("train", 4), ("val", 2)):
        for c in ("ant", "bee", "cat"):
            folder = root / split / c
            folder.mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (20, 24, 3)).astype(np.uint8)).save(folder / f"{i}.png")
    return root


def offline_hub(root: Path, out: Path, monkeypatch: pytest.MonkeyPatch, repo_id: str = "me/mdeq-tiny") -> Path:
    """A Hugging Face cache under ``root`` holding the folder ``out`` as the model repository ``repo_id`` (one
    snapshot, ref main), and the hub client offline (no network); returns ``root``, the cache_dir to pass."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    shutil.copytree(out, repo / "snapshots" / SNAPSHOT)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return root
