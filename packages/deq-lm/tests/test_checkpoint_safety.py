"""A checkpoint is data, never code: a pickle planted in any file of a run folder never runs, on --resume or in
evaluate, and gives a one-line error."""

import shutil
from pathlib import Path

import pytest

from conftest import write_tiny_corpus
from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.testing.faults import damage_weights, plant_pickle
from deq_lm.evaluate import main as evaluate_main
from deq_lm.train import main

ARGS = ["--config", "tiny-lm-deq-transformer", "steps=2", "eval_every=2"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lm")
    ARGS.extend(["--data-dir", str(write_tiny_corpus(root / "corpus"))])
    run = root / "run"
    assert main([*ARGS, "--output-dir", str(run)]) == 0
    return run


def _files(run: Path) -> list[Path]:
    folder = latest_complete_checkpoint(run)
    assert folder is not None
    return [run / "config.json", *sorted(folder.iterdir())]


def test_the_checkpoint_holds_the_files_this_test_plants_into(finished_run: Path) -> None:
    names = {p.name for p in _files(finished_run)}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "train_state.json", "rng_rank0.pt"} <= names
    assert {"memory_rank0.pt", "checkpoint.json", "config.json"} <= names


def test_a_planted_pickle_in_any_file_never_runs(finished_run: Path, tmp_path: Path, capsys) -> None:
    for index, original in enumerate(_files(finished_run)):
        run = tmp_path / f"run{index}"
        shutil.copytree(finished_run, run)
        planted = run / original.relative_to(finished_run)
        marker = tmp_path / f"ran-{planted.name}"
        plant_pickle(planted, marker)
        capsys.readouterr()
        code = main([*ARGS, "--output-dir", str(run), "--resume"])
        err = capsys.readouterr().err
        assert code == 2, planted.name
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert planted.name in err or "no complete checkpoint" in err, err
        code = _evaluate(run)
        assert code == (
            2 if planted.name in ("model.safetensors", "config.json", "checkpoint.json", "run_config.json") else 0
        )
        assert not marker.exists(), planted.name


def _evaluate(run: Path) -> int:
    return evaluate_main(["--checkpoint", str(run), "--no-sweep"])


def test_files_of_older_checkpoints_are_never_read(finished_run: Path, tmp_path: Path) -> None:
    """Accelerate's pickles (custom_checkpoint_*.pkl, random_states_*.pkl, *.bin) beside a checkpoint are ignored."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    folder = latest_complete_checkpoint(run)
    names = ["custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl", "optimizer.bin"]
    for name in names:
        plant_pickle(folder / name, tmp_path / f"ran-{name}")
    assert main([*ARGS, "--output-dir", str(run), "--resume"]) == 0
    assert not any((tmp_path / f"ran-{name}").exists() for name in names)


MISFIT = "does not fit the model that config.json describes ("  # and the first difference torch names


@pytest.mark.parametrize(
    ("fault", "command", "expected"),
    [
        ("other shapes", "evaluate", MISFIT),
        ("other shapes", "resume", MISFIT),
        ("nan", "evaluate", "holds NaN or inf in "),
        ("nan", "resume", "holds NaN or inf in "),
    ],
)
def test_weights_that_do_not_fit_the_model_or_hold_nan_are_one_line(
    finished_run: Path, tmp_path: Path, capsys, fault: str, command: str, expected: str
) -> None:
    """A weights file of other shapes, NaN in the weights: one line naming the file, exit status 2, on --resume and in
    evaluate."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    damage_weights(run, fault)
    capsys.readouterr()
    if command == "resume":
        code = main([*ARGS, "--output-dir", str(run), "--resume"])
    else:
        code = evaluate_main(["--checkpoint", str(run), "--no-sweep"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and "model.safetensors" in err, err
