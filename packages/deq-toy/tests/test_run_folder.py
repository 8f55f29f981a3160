"""The run folder: one run at a time, no silent restart or empty resume, the first metrics
line after a resume averages the same steps as an uninterrupted run, a half-written metrics line or an interrupted
save does not stop a resume, config.json is written after the data are checked; links, a deleted lock and a damaged
log, train state or config are one line (``faults.RUN_FOLDER_FAULTS``)."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from deq_core.train.checkpoints import checkpoint_path
from deq_core.train.metrics import read_metrics
from deq_core.train.rundir import RunLock
from deq_core.train.testing.faults import RUN_FOLDER_FAULTS, check_run_folder_fault, read_only
from deq_toy import evaluate, train
from deq_toy.checkpoint import load_checkpoint

ARGS = ["--config", "synthetic-tiny", "--no-progress", "deq.jac_weight=2"]


def _one_line_error(capsys, *expected: str) -> None:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err


def test_resume_mid_log_interval_gives_the_same_metrics_and_weights(tmp_path: Path, capsys) -> None:
    """log_every=5, stopped after 7 steps: the line of step 10 averages steps 6..10 as in an uninterrupted run."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train.main([*ARGS, "--output-dir", str(full)]) == 0
    assert train.main([*ARGS, "--output-dir", str(cut), "--stop-after", "7"]) == 0
    with (cut / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 10, "split": "tra')  # killed while writing a line
    shutil.copytree(checkpoint_path(cut, 7), checkpoint_path(cut, 9))  # killed while saving step 9 (in place)
    (checkpoint_path(cut, 9) / "checkpoint.json").unlink()
    shutil.copytree(checkpoint_path(cut, 7), cut / "checkpoints" / "step_0000010.partial")
    assert load_checkpoint(cut)["step"] == 7  # evaluate's view: the newest complete checkpoint
    capsys.readouterr()
    assert train.main([*ARGS, "--output-dir", str(cut), "--resume"]) == 0
    assert "dropped a half-written last line" in capsys.readouterr().out
    assert read_metrics(cut / "metrics.jsonl") == read_metrics(full / "metrics.jsonl")
    a, b = load_checkpoint(full)["model"], load_checkpoint(cut)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (cut / "checkpoints" / "step_0000010.partial").exists()
    assert evaluate.main(["--checkpoint", str(cut)]) == 0


def test_a_locked_folder_gives_a_one_line_error(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with RunLock(out):  # another run trains there
        assert train.main([*ARGS, "--output-dir", str(out)]) == 2
    _one_line_error(capsys, "is in use by another training run", "another --output-dir")
    assert not (out / "metrics.jsonl").exists()


def test_resume_of_nothing_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert train.main([*ARGS, "--output-dir", str(tmp_path / "missing"), "--resume"]) == 2
    _one_line_error(capsys, "--resume: no complete checkpoint in", "run without --resume")
    assert not (tmp_path / "missing").exists()


def test_config_is_written_after_the_data_are_checked(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    bad = data / "arith-seed0" / "four-train-len31.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_text("expression\tvalue\tlabel\n1+2\n")
    out = tmp_path / "o"
    assert train.main(["--config", "arith-fc-tiny", "--data-dir", str(data), "--output-dir", str(out)]) == 2
    assert "malformed arithmetic data file" in capsys.readouterr().err
    assert not (out / "config.json").exists()


def test_resume_accepts_the_run_settings_and_records_them_by_dotted_name(tmp_path: Path, capsys) -> None:
    """``run.threads`` and ``run.save_every`` may change on --resume (short or dotted names); the change is recorded
    in config.json by its dotted name; a change of another section is refused, naming its dotted key. Another thread
    count is also recorded as torch's (``torch_threads``) and said in one line (bit-identical resumption is lost)."""
    out = tmp_path / "run"
    args = ["--output-dir", str(out), *ARGS]  # the overrides last
    assert train.main([*args, "--stop-after", "5"]) == 0
    assert train.main(["--resume", *args, "optim.lr=0.1"]) == 2
    _one_line_error(capsys, "optim.lr: 0.005 -> 0.1")
    assert train.main(["--resume", *args, "threads=2", "run.save_every=3"]) == 0
    resumed = json.loads((out / "config.json").read_text())["resumed"]
    changes = {"run.threads": [1, 2], "run.save_every": [10, 3], "torch_threads": [1, 2]}
    changes["run.stop_after"] = [5, 0]  # --stop-after 5 is run.stop_after=5 in config.json; the resume runs to the end
    assert resumed == [{"step": 5, "changes": changes}]
    said = [line for line in capsys.readouterr().out.splitlines() if "torch thread" in line]
    assert len(said) == 1 and "where the run used 1: bit-identical resumption is lost" in said[0], said


def test_a_read_only_output_folder_is_one_line(tmp_path: Path, capsys) -> None:
    """train into a read-only --output-dir, resume a read-only run, evaluate --output into a read-only folder:
    one line each, exit status 2, nothing written (``faults.read_only``: also for root, whom chmod does not stop)."""
    out, ro = tmp_path / "run", tmp_path / "read-only"
    ro.mkdir()
    with read_only(ro):
        assert train.main([*ARGS, "--output-dir", str(ro)]) == 2
    _one_line_error(capsys, f"cannot write to {ro}: ", "choose a writable --output-dir")
    assert list(ro.iterdir()) == []
    assert train.main([*ARGS, "--output-dir", str(out), "--stop-after", "4"]) == 0
    capsys.readouterr()
    with read_only(out):
        assert train.main([*ARGS, "--output-dir", str(out), "--resume"]) == 2
    _one_line_error(capsys, f"cannot write to {out}: ", "choose a writable --output-dir")


def test_evaluate_into_a_read_only_folder_is_one_line(tmp_path: Path, capsys) -> None:
    out, ro = tmp_path / "run", tmp_path / "read-only"
    ro.mkdir()
    assert train.main([*ARGS, "--output-dir", str(out), "--stop-after", "4"]) == 0
    capsys.readouterr()
    with read_only(ro):
        assert evaluate.main(["--checkpoint", str(out), "--output", str(ro / "eval.json")]) == 2
    _one_line_error(capsys, f"cannot write to {ro}: ", "choose a writable --output")
    assert list(ro.iterdir()) == []


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("toy") / "run"
    assert train.main([*ARGS, "--output-dir", str(run), "--stop-after", "5"]) == 0
    return run


@pytest.mark.parametrize("fault", RUN_FOLDER_FAULTS)
def test_a_run_folder_made_unusable_is_one_line_and_nothing_outside_touched(
    stopped_run: Path, tmp_path: Path, capsys, fault: str
) -> None:
    check_run_folder_fault(
        fault, lambda argv: train.main([*ARGS, *argv]), stopped_run, tmp_path, lambda: capsys.readouterr().err
    )
