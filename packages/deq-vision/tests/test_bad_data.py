"""Bad data gets one clear line (DatasetError; the CLI exits with 2) before any training step: unreadable image files,
validation classes, the classifier head against the folder's classes; limits take class-balanced subsets."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from conftest import learnable_images
from deq_core.train.run_config import replace_config
from deq_vision import evaluate, train
from deq_vision.configs import PRESETS
from deq_vision.data import DatasetError, balanced_subset, build_datasets, image_folder, imagefolder, write_cifar_folder

FOLDER_RUN = ["--config", "tiny-mdeq", "dataset=folder", "steps=2", "eval_every=2", "save_every=2"]


def _error_line(capsys: pytest.CaptureFixture[str], call: list[str]) -> str:
    """Run the training CLI, expect exit code 2 before training starts (no startup line), return its stderr (one
    line)."""
    code = train.main(call)
    assert code == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("python -m deq_vision.train: error: "), err
    assert "parameters" not in out, out  # the line printed once the data is loaded, before the first step
    return err


def _truncated_png(path: Path) -> None:
    """A PNG whose header is intact but whose pixel data is cut short."""
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 24, 3)).astype(np.uint8)).save(buffer, "PNG")
    data = buffer.getvalue()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", ["not an image", "truncated"])
def test_unreadable_image_is_one_line_before_training(
    image_folder_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    bad = image_folder_dir / "train" / "bee" / "broken.png"
    if damage == "truncated":
        _truncated_png(bad)
    else:
        bad.write_bytes(b"this is not an image\n" * 10)
    out = tmp_path / "run"
    err = _error_line(capsys, [*FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", str(out)])
    assert str(bad) in err and "remove or replace" in err
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


def test_image_that_fails_at_load_time_names_the_file_also_from_a_worker(image_folder_dir: Path) -> None:
    """Above the up-front check's limits, a bad file is found when loaded: one line naming it, also when a DataLoader
    worker process re-raises it."""
    _truncated_png(image_folder_dir / "val" / "ant" / "0.png")
    val = image_folder(image_folder_dir, "val")
    for workers in (0, 1):
        with pytest.raises(DatasetError) as info:
            list(DataLoader(val, batch_size=2, num_workers=workers))
        message = str(info.value)
        assert "\n" not in message and "Traceback" not in message, message
        assert message.startswith(str(image_folder_dir / "val" / "ant" / "0.png")), message


def test_above_the_check_limits_a_bad_file_stops_train_and_evaluate_with_one_line(
    image_folder_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    common = ["--data-dir", str(image_folder_dir), "--output-dir", str(out)]
    assert train.main([*FOLDER_RUN, *common]) == 0
    bad = image_folder_dir / "val" / "cat" / "1.png"
    _truncated_png(bad)
    assert imagefolder.check_image_files([str(bad)], decode_limit=0) == "headers"  # its header is fine
    monkeypatch.setattr(imagefolder, "HEADER_CHECK_LIMIT", 0)  # as for a folder of more than 200,000 images
    capsys.readouterr()
    code = evaluate.main(["--checkpoint", str(out), "--data-dir", str(image_folder_dir), "--no-sweep"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(bad) in err, err
    code = train.main([*FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", str(tmp_path / "again")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(bad) in err, err


class _Failing(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        raise DatasetError(f"item {index} is broken: fix it")


def test_dataset_error_from_a_worker_keeps_its_own_message() -> None:
    with pytest.raises(DatasetError) as info:
        next(iter(DataLoader(_Failing(), num_workers=1)))
    assert str(info.value) == "item 0 is broken: fix it"


def test_validation_folder_missing_a_class_keeps_the_training_labels(image_folder_dir: Path) -> None:
    for image in (image_folder_dir / "val" / "bee").iterdir():
        image.unlink()
    (image_folder_dir / "val" / "bee").rmdir()
    cfg = replace_config(PRESETS["tiny-mdeq"], {"dataset": "folder", "num_classes": 3})
    train_set, val_set = build_datasets(cfg, image_folder_dir)
    labels = [val_set[i][1] for i in range(len(val_set))]
    assert labels == [0, 0, 2, 2]  # ant = 0, cat = 2 as in training (not 1)
    assert train_set.class_to_idx == {"ant": 0, "bee": 1, "cat": 2}


def test_validation_class_unknown_to_training_is_an_error(image_folder_dir: Path) -> None:
    (image_folder_dir / "train" / "cat").rename(image_folder_dir / "train" / "cow")
    cfg = replace_config(PRESETS["tiny-mdeq"], {"dataset": "folder", "num_classes": 3})
    with pytest.raises(DatasetError, match=r"class folders that .*train lacks: cat;"):
        build_datasets(cfg, image_folder_dir)


def test_folder_dataset_takes_its_head_from_the_class_folders(image_folder_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert train.main([*FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert (saved["data"]["dataset"], saved["data"]["num_classes"]) == ("folder", 3)
    model, _ = evaluate.load_model(out)[1:]
    assert model.num_classes == 3
    assert evaluate.main(["--checkpoint", str(out), "--data-dir", str(image_folder_dir), "--no-sweep"]) == 0
    assert train.main([*FOLDER_RUN, "--data-dir", str(image_folder_dir), "--output-dir", str(out), "--resume"]) == 0


def test_head_that_does_not_match_the_folder_is_one_line(
    image_folder_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--data-dir", str(image_folder_dir), "--output-dir", str(tmp_path / "r")]
    err = _error_line(capsys, [*FOLDER_RUN, "dataset=imagenet", *common])
    assert "has 3 classes but the model's head has 1000 outputs" in err and "num_classes=3" in err
    err = _error_line(capsys, [*FOLDER_RUN, "num_classes=5", *common])
    assert "has 3 classes but the model's head has 5 outputs" in err
    with pytest.raises(ValueError, match=r"data\.num_classes must be 0 or 10 \(dataset=cifar10 has 10 classes\)"):
        replace_config(PRESETS["tiny-mdeq"], {"num_classes": 7})


def test_limits_take_a_class_balanced_subset_of_sorted_data(tmp_path: Path) -> None:
    images, _ = learnable_images(120)
    # class-sorted, as an ImageFolder lists its files: 100 training images, 10 per class, then 20 test images
    labels = np.concatenate([np.repeat(np.arange(10), 10), np.sort(np.arange(20) % 10)])
    write_cifar_folder(tmp_path, images, labels)
    cfg = replace_config(PRESETS["tiny-mdeq"], {"data.train_limit": 30, "data.eval_limit": 10})
    train_set, eval_set = build_datasets(cfg, tmp_path)
    assert np.array_equal(np.bincount([train_set[i][1] for i in range(len(train_set))], minlength=10), [3] * 10)
    assert np.array_equal(np.bincount([eval_set[i][1] for i in range(len(eval_set))], minlength=10), [1] * 10)
    again, _ = build_datasets(cfg, tmp_path)
    assert again.indices == train_set.indices  # the same images in every run


@pytest.mark.parametrize("limit", [1, 5, 7, 29, 30])
def test_balanced_subset_counts(limit: int) -> None:
    labels = np.array([0] * 20 + [1] * 3 + [2] * 7)
    chosen = balanced_subset(labels, limit, seed=3)
    counts = np.bincount(labels[chosen], minlength=3)
    assert len(chosen) == len(set(chosen.tolist())) == limit
    assert np.all(np.diff(chosen) > 0)
    # as equal as the class sizes allow: no class has 2 more than another that still had images left
    available = np.array([20, 3, 7])
    for a in range(3):
        for b in range(3):
            if counts[b] < available[b]:
                assert counts[a] <= counts[b] + 1, counts
    assert torch.equal(torch.as_tensor(chosen), torch.as_tensor(balanced_subset(labels, limit, seed=3)))


def test_a_failed_cifar_download_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """--download without a network (torchvision's URLError, an OSError): one line saying what to check, exit 2,
    instead of a traceback. The download is replaced by one that fails as urllib does offline."""
    import urllib.error

    import torchvision.datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", offline)
    line = _error_line(capsys, ["--config", "tiny-mdeq", "--data-dir", str(tmp_path), "--download",
                                "--output-dir", str(tmp_path / "run")])  # fmt: skip
    assert "could not download CIFAR-10 into" in line and "check the network connection" in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
