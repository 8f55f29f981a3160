"""A checkpoint is data, never code: a pickle planted in any file of a run folder never runs, on --resume or in
evaluate, and gives a one-line error."""

import shutil
from pathlib import Path

import pytest

from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.testing.faults import damage_weights, plant_pickle, set_saved_setting
from deq_toy import evaluate, train

ARGS = ["--config", "synthetic-tiny", "--no-progress", "deq.jac_weight=2"]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("toy") / "run"
    assert train.main([*ARGS, "--output-dir", str(run), "--stop-after", "5"]) == 0
    return run


def _files(run: Path) -> list[Path]:
    folder = latest_complete_checkpoint(run)
    assert folder is not None
    return sorted(folder.iterdir())


def test_the_checkpoint_holds_the_files_this_test_plants_into(stopped_run: Path) -> None:
    names = {p.name for p in _files(stopped_run)}
    assert names == {
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "train_state.json",
        "rng_rank0.pt",
        "checkpoint.json",
        "run_config.json",
    }


def test_a_planted_pickle_in_any_file_never_runs(stopped_run: Path, tmp_path: Path, capsys) -> None:
    for index, original in enumerate(_files(stopped_run)):
        run = tmp_path / f"run{index}"
        shutil.copytree(stopped_run, run)
        planted = run / original.relative_to(stopped_run)
        marker = tmp_path / f"ran-{planted.name}"
        plant_pickle(planted, marker)
        capsys.readouterr()
        assert train.main([*ARGS, "--output-dir", str(run), "--resume"]) == 2, planted.name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert planted.name in err or "no complete checkpoint" in err, err
        code = evaluate.main(["--checkpoint", str(run)])
        assert code == (
            2 if planted.name in ("model.safetensors", "train_state.json", "checkpoint.json", "run_config.json") else 0
        )
        assert not marker.exists(), planted.name


MISFIT = "does not fit the model that config.json describes ("  # and the first difference torch names


@pytest.mark.parametrize(
    ("fault", "command", "expected"),
    [
        ("model.width=20", "evaluate", MISFIT),
        ("other shapes", "evaluate", MISFIT),
        ("other shapes", "resume", MISFIT),
        ("nan", "evaluate", "holds NaN or inf in "),
        ("nan", "resume", "holds NaN or inf in "),
    ],
)
def test_weights_that_do_not_fit_the_model_or_hold_nan_are_one_line(
    stopped_run: Path, tmp_path: Path, capsys, fault: str, command: str, expected: str
) -> None:
    """config.json naming another model size, a weights file of other shapes, NaN in the weights: one line naming
    the file, exit status 2, on --resume and in evaluate."""
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    if "=" in fault:
        key, value = fault.split("=")
        set_saved_setting(run, key, int(value))
    else:
        damage_weights(run, fault)
    capsys.readouterr()
    if command == "resume":
        code = train.main([*ARGS, "--output-dir", str(run), "--resume"])
    else:
        code = evaluate.main(["--checkpoint", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and "model.safetensors" in err, err


@pytest.mark.parametrize("model", ["gru", "fc"])
def test_a_config_naming_another_model_is_one_line_in_evaluate(tmp_path: Path, capsys, model: str) -> None:
    """An arithmetic run whose config.json (and its checkpoints' copies) names another model than the one trained:
    one line naming the weights file, exit status 2."""
    run, data = tmp_path / "run", tmp_path / "data"
    args = ["--config", "arith-deq-tiny", "--no-progress", "--data-dir", str(data)]
    assert train.main([*args, "--output-dir", str(run), "--stop-after", "2"]) == 0
    set_saved_setting(run, "model.name", model)
    capsys.readouterr()
    assert evaluate.main(["--checkpoint", str(run), "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert MISFIT in err and "model.safetensors" in err, err
