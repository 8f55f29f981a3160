"""The run folder: resume is bit-identical with augmentation, one run at a time, no silent
restart or empty resume, config.json written after the data are checked and kept on resume, a half-written metrics
line or an interrupted save does not stop a resume; links, a deleted lock and a damaged log, train state or config are
one line (``faults.RUN_FOLDER_FAULTS``)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import learnable_images, write_cifar_folder
from deq_core.train.checkpoints import checkpoint_path
from deq_core.train.metrics import read_metrics
from deq_core.train.run_config import replace_config
from deq_core.train.rundir import RunLock
from deq_core.train.testing.faults import RUN_FOLDER_FAULTS, check_run_folder_fault, read_only
from deq_vision import evaluate, train
from deq_vision.configs import get_config
from deq_vision.data import build_datasets
from deq_vision.data.seeded import SeededItems

ARGS = ["--config", "tiny-mdeq", "steps=6", "eval_every=3", "save_every=3", "augment=true", "mixup=0.2"]


def _one_line_error(capsys, *expected: str) -> None:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "images_per_s"} for r in read_metrics(run / "metrics.jsonl")]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(checkpoint_path(run, step) / "model.safetensors"))


def test_resume_with_augmentation_is_bit_identical(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    """The data loader augments batches ahead of the step being trained; a checkpoint must not depend on that.
    Also: a half-written metrics line, an interrupted save in place and a .partial folder do not stop the resume."""
    data = ["--data-dir", str(cifar_dir)]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train.main([*ARGS, *data, "--output-dir", str(full)]) == 0
    assert train.main([*ARGS, "stop_after=4", *data, "--output-dir", str(cut)]) == 0
    with (cut / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 5, "split": "train", "lo')  # killed while writing the line of step 5
    shutil.copytree(checkpoint_path(cut, 4), checkpoint_path(cut, 5))  # killed while saving step 5 (in place)
    (checkpoint_path(cut, 5) / "checkpoint.json").unlink()
    shutil.copytree(checkpoint_path(cut, 4), cut / "checkpoints" / "step_0000006.partial")
    assert evaluate.main(["--checkpoint", str(cut), *data, "--no-sweep"]) == 0  # the newest complete one
    capsys.readouterr()
    assert train.main([*ARGS, *data, "--output-dir", str(cut), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "dropped a half-written last line" in out and "step_0000004" in out
    a, b = _weights(full, 6), _weights(cut, 6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(cut) == _metrics(full)
    assert not (cut / "checkpoints" / "step_0000006.partial").exists()


def test_a_locked_folder_gives_a_one_line_error(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with RunLock(out):  # another run trains there
        assert train.main([*ARGS, "--data-dir", str(cifar_dir), "--output-dir", str(out)]) == 2
    _one_line_error(capsys, "is in use by another training run", "another --output-dir")
    assert not (out / "metrics.jsonl").exists() and not (out / "config.json").exists()


def test_no_silent_restart_and_no_empty_resume(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    data, out = ["--data-dir", str(cifar_dir)], tmp_path / "run"
    assert train.main([*ARGS, *data, "--output-dir", str(tmp_path / "missing"), "--resume"]) == 2
    _one_line_error(capsys, "--resume: no complete checkpoint in")
    assert not (tmp_path / "missing").exists()
    assert train.main([*ARGS, "steps=2", *data, "--output-dir", str(out)]) == 0
    before = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert train.main([*ARGS, "steps=2", *data, "--output-dir", str(out)]) == 2
    _one_line_error(capsys, "already holds a run", "pass --resume")
    assert (out / "metrics.jsonl").read_text() == before


def test_config_is_written_after_the_data_are_checked_and_kept_on_resume(cifar_dir, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert train.main([*ARGS, "--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(out)]) == 2
    assert "cifar-10-batches-py" in capsys.readouterr().err
    assert not (out / "config.json").exists()
    assert train.main([*ARGS, "stop_after=2", "--data-dir", str(cifar_dir), "--output-dir", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["data_dir"] == str(cifar_dir)
    moved = tmp_path / "moved"
    shutil.copytree(cifar_dir, moved)
    assert train.main([*ARGS, "--data-dir", str(moved), "--output-dir", str(out), "--resume"]) == 0
    after = json.loads((out / "config.json").read_text())
    assert after["config"] == saved["config"] and after["data_dir"] == str(cifar_dir)
    assert after["resumed"] == [
        {"step": 2, "changes": {"run.stop_after": [2, 0], "data_dir": [str(cifar_dir), str(moved)]}}
    ]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_augmentation_depends_on_seed_epoch_and_index_only(cifar_dir: Path, num_workers: int) -> None:
    train_set, _ = build_datasets(replace_config(get_config("tiny-mdeq"), {"data.augment": True}), cifar_dir)
    items = SeededItems(train_set, seed=3)
    torch.manual_seed(0)
    first = items[5][0]
    torch.rand(100)  # the global generators' state does not matter...
    assert torch.equal(items[5][0], first)
    state = torch.get_rng_state()
    items[7]
    assert torch.equal(torch.get_rng_state(), state)  # ...and reading an item draws nothing from them
    items.set_epoch(1)
    assert not torch.equal(items[5][0], first)  # another epoch, another augmentation
    items.set_epoch(0)
    loader = torch.utils.data.DataLoader(items, batch_size=4, num_workers=num_workers)
    assert torch.equal(next(iter(loader))[0][0], items[0][0])  # the same in worker processes


def test_a_read_only_output_folder_is_one_line(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    """train into a read-only --output-dir is one line, exit status 2, nothing written
    (``faults.read_only``: also for root, whom chmod does not stop)."""
    ro = tmp_path / "read-only"
    ro.mkdir()
    with read_only(ro):
        assert train.main([*ARGS, "--data-dir", str(cifar_dir), "--output-dir", str(ro)]) == 2
    _one_line_error(capsys, f"cannot write to {ro}: ", "choose a writable --output-dir")
    assert list(ro.iterdir()) == []


def test_evaluate_in_a_read_only_run_folder_is_one_line(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    """The hard-stop sweep's files go to the run folder: read-only, one line before the sweep; --output-dir puts
    them elsewhere."""
    data, out = ["--data-dir", str(cifar_dir)], tmp_path / "run"
    assert train.main([*ARGS, "steps=3", *data, "--output-dir", str(out)]) == 0
    sweep = ["--checkpoint", str(out), *data, "--max-steps", "2", "--limit", "20"]
    capsys.readouterr()
    with read_only(out):
        assert evaluate.main(sweep) == 2
        _one_line_error(capsys, f"cannot write to {out}: ", "choose a writable --output-dir")
        assert evaluate.main([*sweep, "--output-dir", str(tmp_path / "sweep")]) == 0
    assert not (out / "hard_stop.json").exists() and (tmp_path / "sweep" / "hard_stop.json").is_file()


def test_resume_with_another_thread_count_is_recorded_and_said_in_one_line(cifar_dir: Path, tmp_path: Path,
                                                                         capsys) -> None:  # fmt: skip
    """--threads changes the rounding; the run records torch's thread count, and a resume with
    another one is recorded in "resumed" with one console line (bit-identical resumption is lost)."""
    data, out = ["--data-dir", str(cifar_dir)], tmp_path / "run"
    assert train.main([*ARGS, "stop_after=3", *data, "--output-dir", str(out), "--threads", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["torch_threads"] == 1
    capsys.readouterr()
    assert train.main([*ARGS, *data, "--output-dir", str(out), "--resume", "--threads", "2"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "torch thread" in line]
    assert len(said) == 1 and "with 2 torch thread(s) where the run used 1: bit-identical" in said[0], said
    saved = json.loads((out / "config.json").read_text())
    assert (saved["torch_threads"], saved["resumed"][0]["changes"]["torch_threads"]) == (1, [1, 2]), saved


def test_evaluate_replaces_links_planted_at_its_outputs_and_never_writes_through_them(cifar_dir, tmp_path) -> None:
    """hard_stop.json / hard_stop.png linked to files outside the run are replaced by the run's
    own files; the files outside keep their content."""
    data, out, elsewhere = ["--data-dir", str(cifar_dir)], tmp_path / "run", tmp_path / "elsewhere"
    assert train.main([*ARGS, "steps=3", *data, "--output-dir", str(out)]) == 0
    elsewhere.mkdir()
    for name in ("hard_stop.json", "hard_stop.png"):
        (elsewhere / name).write_text("outside\n")
        (out / name).symlink_to(elsewhere / name)
    assert evaluate.main(["--checkpoint", str(out), *data, "--max-steps", "2", "--limit", "20"]) == 0
    for name in ("hard_stop.json", "hard_stop.png"):
        assert (elsewhere / name).read_text() == "outside\n", name
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert [row["max_iter"] for row in json.loads((out / "hard_stop.json").read_text())["rows"]] == [1, 2]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A run stopped after 3 of its 6 steps, and the options that train it (the settings last)."""
    root = tmp_path_factory.mktemp("vision")
    write_cifar_folder(root / "cifar", *learnable_images(96))
    args = ["--data-dir", str(root / "cifar"), *ARGS]
    assert train.main([*args, "run.stop_after=3", "--output-dir", str(root / "run")]) == 0
    return root / "run", args


@pytest.mark.parametrize("fault", RUN_FOLDER_FAULTS)
def test_a_run_folder_made_unusable_is_one_line_and_nothing_outside_touched(
    stopped_run: tuple[Path, list[str]], tmp_path: Path, capsys, fault: str
) -> None:
    stopped, args = stopped_run
    check_run_folder_fault(
        fault, lambda argv: train.main([*args, *argv]), stopped, tmp_path, lambda: capsys.readouterr().err
    )
