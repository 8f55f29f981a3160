"""A checkpoint is data, never code: a pickle planted in any file of a run folder never runs, on --resume or in
evaluate, and gives a one-line error."""

import shutil
from pathlib import Path

import pytest

from conftest import learnable_images, write_cifar_folder
from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.testing.faults import damage_weights, plant_pickle, set_saved_setting
from deq_vision import evaluate, train

ARGS = ["--config", "tiny-mdeq", "steps=2", "ema_decay=0.9", "augment=true", "mixup=0.2"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    images, labels = learnable_images(96)
    write_cifar_folder(root / "cifar", images, labels)
    ARGS.extend(["--data-dir", str(root / "cifar")])
    run = root / "run"
    assert train.main([*ARGS, "--output-dir", str(run)]) == 0
    return run


def _files(run: Path) -> list[Path]:
    folder = latest_complete_checkpoint(run)
    assert folder is not None
    return [run / "config.json", *sorted(folder.iterdir())]


def test_the_checkpoint_holds_the_files_this_test_plants_into(finished_run: Path) -> None:
    names = {p.name for p in _files(finished_run)}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "ema.pt", "train_state.json", "rng_rank0.pt"} <= names
    assert {"checkpoint.json", "config.json"} <= names


def test_a_planted_pickle_in_any_file_never_runs(finished_run: Path, tmp_path: Path, capsys) -> None:
    data_dir = ARGS[-1]
    for index, original in enumerate(_files(finished_run)):
        run = tmp_path / f"run{index}"
        shutil.copytree(finished_run, run)
        planted = run / original.relative_to(finished_run)
        marker = tmp_path / f"ran-{planted.name}"
        plant_pickle(planted, marker)
        capsys.readouterr()
        assert train.main([*ARGS, "--output-dir", str(run), "--resume"]) == 2, planted.name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert planted.name in err or "no complete checkpoint" in err, err
        code = evaluate.main(["--checkpoint", str(run), "--data-dir", data_dir, "--no-sweep"])
        assert code == (
            2 if planted.name in ("model.safetensors", "config.json", "checkpoint.json", "run_config.json") else 0
        )
        assert not marker.exists(), planted.name


def test_files_of_older_checkpoints_are_never_read(finished_run: Path, tmp_path: Path) -> None:
    """Accelerate's pickles (custom_checkpoint_*.pkl, random_states_*.pkl, *.bin) beside a checkpoint are ignored."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    folder = latest_complete_checkpoint(run)
    names = ["custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl", "optimizer.bin"]
    for name in names:
        plant_pickle(folder / name, tmp_path / f"ran-{name}")
    assert train.main([*ARGS, "--output-dir", str(run), "--resume"]) == 0
    assert not any((tmp_path / f"ran-{name}").exists() for name in names)


MISFIT = "does not fit the model that config.json describes ("  # and the first difference torch names


@pytest.mark.parametrize(
    ("fault", "command", "expected"),
    [
        ("model.name=mdeq_tiny_cifar10", "evaluate", MISFIT),  # another size of the MDEQ
        ("model.name=resnet18", "evaluate", MISFIT),  # another model
        ("other shapes", "evaluate", MISFIT),
        ("other shapes", "resume", MISFIT),
        ("nan", "evaluate", "holds NaN or inf in "),
        ("nan", "resume", "holds NaN or inf in "),
    ],
)
def test_weights_that_do_not_fit_the_model_or_hold_nan_are_one_line(
    finished_run: Path, tmp_path: Path, capsys, fault: str, command: str, expected: str
) -> None:
    """config.json naming another model of the registry, a weights file of other shapes, NaN in the weights: one line
    naming the file, exit status 2, on --resume and in evaluate."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    if "=" in fault:
        set_saved_setting(run, *fault.split("="))
    else:
        damage_weights(run, fault)
    capsys.readouterr()
    if command == "resume":
        code = train.main([*ARGS, "--output-dir", str(run), "--resume"])
    else:
        code = evaluate.main(["--checkpoint", str(run), "--data-dir", ARGS[-1], "--no-sweep"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and "model.safetensors" in err, err
