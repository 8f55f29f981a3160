"""Glyphs: deterministic by seed, balanced, distinct between classes and between train / test, readable by the
training pipeline, and a clear error when missing or malformed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deq_vision.configs import get_config
from deq_vision.data import DatasetError, build_datasets
from deq_vision.data.glyphs import NUM_CLASSES, Glyphs, generate, main, read_split, write_glyphs


def test_same_seed_same_images_other_seed_other_images() -> None:
    a_images, a_labels = generate(40, seed=3)
    b_images, b_labels = generate(40, seed=3)
    c_images, _ = generate(40, seed=4)
    np.testing.assert_array_equal(a_images, b_images)
    np.testing.assert_array_equal(a_labels, b_labels)
    assert not np.array_equal(a_images, c_images)
    assert a_images.shape == (40, 16, 16) and a_images.dtype == np.uint8
    assert np.bincount(a_labels, minlength=NUM_CLASSES).tolist() == [4] * NUM_CLASSES


def test_classes_differ_more_than_samples_of_one_class() -> None:
    """Nearest-class-mean on clean-ish glyphs beats chance by far: the labels are in the pixels."""
    images, labels = generate(2000, seed=0)
    x = images.reshape(len(images), -1).astype(np.float64)
    x = (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + 1e-9)
    train, test = slice(0, 1500), slice(1500, None)
    means = np.stack([x[train][labels[train] == c].mean(0) for c in range(NUM_CLASSES)])
    predicted = np.argmax(x[test] @ means.T, axis=1)
    accuracy = float((predicted == labels[test]).mean())
    assert 0.3 < accuracy < 0.95, accuracy  # learnable, yet not solved by a template match


def test_written_set_reads_back_and_feeds_the_pipeline(tmp_path: Path) -> None:
    out = write_glyphs(tmp_path / "g", n_train=30, n_test=20, size=12, seed=1)
    images, labels = read_split(out, train=True)
    assert images.shape == (30, 12, 12) and labels.shape == (30,)
    test_images, _ = read_split(out, train=False)
    assert not any(np.array_equal(t, i) for t in test_images for i in images)  # disjoint random streams
    cfg = get_config("glyphs-mdeq")
    train_set, eval_set = build_datasets(cfg, out)
    x, y = train_set[0]
    assert tuple(x.shape) == (1, 16, 16) and 0 <= y < NUM_CLASSES
    assert len(eval_set) == 20 and isinstance(train_set, Glyphs)


def test_cli_writes_the_files(tmp_path: Path) -> None:
    assert main(["--output-dir", str(tmp_path / "g"), "--train", "10", "--test", "10"]) == 0
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["glyphs.json", "test.npz", "train.npz"]


def test_cli_bad_size_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--output-dir", str(tmp_path / "g"), "--size", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_vision.data glyphs: error: need n >= 1 images of size >= 4 pixels")
    assert err.count("\n") == 1


def test_missing_or_malformed_set_raises_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="python -m deq_vision.data glyphs"):
        read_split(tmp_path, train=True)
    np.savez(tmp_path / "train.npz", images=np.zeros((3, 8, 8), np.float32), labels=np.zeros(3, np.int64))
    with pytest.raises(DatasetError, match="images float32"):
        read_split(tmp_path, train=True)
    (tmp_path / "test.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="not a glyphs file"):
        read_split(tmp_path, train=False)
    with pytest.raises(DatasetError, match="needs --data-dir"):
        build_datasets(get_config("glyphs-mdeq"), None)
