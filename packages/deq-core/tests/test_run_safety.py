"""deq_core.train checkpoints, state and run folders, crash safety and security: a checkpoint appears only complete (a
failure at any point of a save leaves the previous one in use), files load with nothing executable, random states
round-trip as plain data, one run per folder, no silent restart, and a half-written metrics line is dropped on
resume."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ExampleConfig as Config
from deq_core.train.checkpoints import (
    CheckpointError,
    checkpoint_path,
    clean_partial_checkpoints,
    latest_complete_checkpoint,
    read_json,
    safe_load,
)
from deq_core.train.metrics import MetricsLog
from deq_core.train.rng import rng_state, set_rng_state
from deq_core.train.run_config import check_resume_config, record_resume, save_config
from deq_core.train.rundir import RunDirError, RunLock, check_run_dir
from deq_core.train.state import TrainState, load_training_checkpoint, save_training_checkpoint
from deq_core.train.testing.faults import plant_pickle, save_points


class Crash(BaseException):
    """The process dies here: a BaseException, which no code of a save handles (as a SIGKILL would not let it)."""


def _save(root: Path, step: int, value: float) -> None:
    model = torch.nn.Linear(2, 1)
    torch.nn.init.constant_(model.weight, value)
    state = TrainState()
    state.step = step
    save_training_checkpoint(root, state, {"model": model}, per_process={"extra": [torch.ones(2) * value, None]})


def _count_save_points(root: Path) -> int:
    calls: list[str] = []
    with save_points(root / "checkpoints", lambda call, path: calls.append(call)):
        _save(root, 1, 1.0)
    return len(calls)


def test_a_failure_at_any_point_of_a_save_leaves_the_previous_checkpoint_in_use(tmp_path: Path) -> None:
    """The save is stopped after each step it takes on disk (each os.fsync / os.rename / os.replace under the
    checkpoints folder, injected from here: ``faults.save_points``): the newest complete checkpoint is the previous
    one until the new folder is renamed into place, and then the new one; either loads whole."""
    points = _count_save_points(tmp_path / "count")
    assert points >= 8  # a flush per file (model, train_state, rng, extra, manifest), the folder's, the rename, ...
    for crash_at in range(1, points + 1):
        root = tmp_path / f"crash{crash_at}"
        _save(root, 1, 1.0)
        calls: list[tuple[str, str]] = []

        def fail(call: str, path: str, crash_at: int = crash_at, calls: list[tuple[str, str]] = calls) -> None:
            calls.append((call, path))
            if len(calls) == crash_at:
                raise Crash(f"{call} {path}")

        with pytest.raises(Crash), save_points(root / "checkpoints", fail):
            _save(root, 2, 2.0)
        renamed = any(call in ("rename", "replace") and "step_0000002.partial" in path for call, path in calls)
        expected_step = 2 if renamed else 1
        latest = latest_complete_checkpoint(root)
        assert latest == checkpoint_path(root, expected_step), calls[-1]
        model, state = torch.nn.Linear(2, 1), TrainState()
        extra = load_training_checkpoint(latest, state, {"model": model}, per_process=["extra"])
        assert state.step == expected_step and float(model.weight[0, 0].detach()) == expected_step
        assert torch.equal(extra["extra"][0], torch.ones(2) * expected_step) and extra["extra"][1] is None
        leftovers = clean_partial_checkpoints(root)
        assert [p.name for p in leftovers] == ([] if expected_step == 2 else ["step_0000002.partial"])
        assert sorted(p.name for p in (root / "checkpoints").iterdir()) == [
            f"step_{s:07d}" for s in range(1, expected_step + 1)
        ]


def test_a_planted_pickle_never_runs_and_raises_a_clear_error(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for name in ("state.pt", "train_state.json", "custom_checkpoint_0.pkl"):
        plant_pickle(tmp_path / name, marker)
        with pytest.raises(CheckpointError, match=f"{name} cannot be read as tensors and plain data.*Nothing in it"):
            safe_load(tmp_path / name)
        with pytest.raises(CheckpointError, match=f"{name} cannot be read"):
            read_json(tmp_path / name)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="missing"):
        safe_load(tmp_path / "absent.pt")


def test_random_states_round_trip_as_plain_data(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    torch.save(rng_state(), tmp_path / "rng.pt")
    first = (random.random(), float(np.random.rand()), float(torch.rand(())))
    set_rng_state(safe_load(tmp_path / "rng.pt"))  # weights_only=True: nothing but tensors and plain data
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == first


def test_random_states_without_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deq-core needs torch only: without NumPy the Python and torch states still round-trip."""
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
    random.seed(1)
    torch.manual_seed(3)
    state = rng_state()
    assert "numpy" not in state
    torch.save(state, tmp_path / "rng.pt")
    first = (random.random(), float(torch.rand(())))
    set_rng_state(safe_load(tmp_path / "rng.pt"))
    assert (random.random(), float(torch.rand(()))) == first


def test_the_processes_of_a_checkpoint_must_match(tmp_path: Path) -> None:
    _save(tmp_path, 3, 1.0)
    with pytest.raises(CheckpointError, match="written by 1 process.*this run has 2"):
        load_training_checkpoint(checkpoint_path(tmp_path, 3), TrainState(), {}, processes=2)


def test_one_run_per_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with RunLock(out):
        with pytest.raises(RunDirError, match=r"run.* is in use by another training run \(pid \d+\)"):
            with RunLock(out):
                pass
        (out / "metrics.jsonl").write_text("")
    with RunLock(out):  # released
        pass
    assert (out / "metrics.jsonl").is_file()
    with RunLock(tmp_path / "failed"):  # a run that fails before writing anything leaves no folder
        pass
    assert not (tmp_path / "failed").exists()


def test_check_run_dir_refuses_silent_restarts_and_empty_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RunDirError, match="--resume: no complete checkpoint in .*run without --resume"):
        check_run_dir(out, resume=True)
    assert check_run_dir(out, resume=False) is None
    save_config(Config(), out, "test")  # started, killed before its first checkpoint: may start over
    assert check_run_dir(out, resume=False) is None
    with pytest.raises(RunDirError, match="no complete checkpoint"):
        check_run_dir(out, resume=True)
    _save(out, 4, 1.0)
    assert check_run_dir(out, resume=True) == checkpoint_path(out, 4)
    with pytest.raises(RunDirError, match=r"already holds a run \(checkpoint step_0000004\); pass --resume"):
        check_run_dir(out, resume=False)


def test_resume_records_allowed_changes_and_keeps_the_config(tmp_path: Path) -> None:
    save_config(Config(), tmp_path, "test", data_dir="/data/a")
    changes = check_resume_config(tmp_path, Config(jitter=True), {"jitter"}, data_dir="/data/b")
    assert changes == {"jitter": (False, True), "data_dir": ("/data/a", "/data/b")}
    record_resume(tmp_path, 7, changes)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["config"]["jitter"] is False and saved["data_dir"] == "/data/a"
    assert saved["resumed"] == [{"step": 7, "changes": {"jitter": [False, True], "data_dir": ["/data/a", "/data/b"]}}]
    assert check_resume_config(tmp_path, Config(), data_dir="/data/a") == {}


def test_a_resumed_run_keeps_the_metrics_lines_written_before_its_checkpoint(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.jsonl")
    assert log.line_count() == 0
    for step in (1, 2):
        log.write({"step": step, "split": "train", "loss": 1.0 / step})
    saved_lines = log.line_count()
    log.write({"step": 2, "split": "test", "loss": 0.4})  # written after the checkpoint of step 2
    with log.path.open("a") as fh:
        fh.write('{"step": 3, "split": "tra')  # killed while writing
    assert saved_lines == 2 and log.resume_at(saved_lines) is True
    assert [(r["step"], r["split"]) for r in log.read()] == [(1, "train"), (2, "train")]
    assert log.resume_at(2) is False and log.line_count() == 2
