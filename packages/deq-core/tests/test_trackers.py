"""Experiment trackers and the launcher's settings (deq_core.train.trackers, deq_core.train.launch): what the trackers
get from a metrics record and a config, the line for a tracker that is not installed, which mixed precision wins, and
the line naming the ranks that did not answer."""

from __future__ import annotations

import dataclasses

import accelerate.tracking
import pytest

from deq_core.train.errors import UsageError
from deq_core.train.launch import choose_precision, recorded_precision
from deq_core.train.run_config import ResumeConfigError
from deq_core.train.trackers import (
    check_tracker_names,
    check_trackers_installed,
    hyperparameters,
    tracker_init_kwargs,
    tracker_names,
    tracker_values,
)


@dataclasses.dataclass(frozen=True)
class _Inner:
    max_iter: int = 12
    solver: str | None = None
    sizes: tuple[int, ...] = (4, 5)


@dataclasses.dataclass(frozen=True)
class _Config:
    lr: float = 1e-3
    jitter: bool = True
    deq: _Inner = dataclasses.field(default_factory=_Inner)


def test_a_record_becomes_split_prefixed_numbers_at_its_step():
    record = {"step": 7, "split": "train", "loss": 0.5, "nfe_forward": 12, "mode": "solve", "jacobian_active": True}
    assert tracker_values(record) == {"train/loss": 0.5, "train/nfe_forward": 12.0, "train/jacobian_active": 1.0}
    assert tracker_values({"step": 8, "split": "valid", "ppl": 31.5}) == {"valid/ppl": 31.5}


def test_hyperparameters_are_flat_and_of_the_types_tensorboard_accepts():
    values = hyperparameters(_Config(), mixed_precision="bf16")
    assert values == {
        "lr": 1e-3, "jitter": True, "deq.max_iter": 12, "deq.solver": "none", "deq.sizes": "(4, 5)",
        "mixed_precision": "bf16",
    }  # fmt: skip
    assert all(isinstance(v, (bool, int, float, str)) for v in values.values())


def test_trackers_write_inside_the_run_folder_and_continue_on_resume(tmp_path):
    kwargs = tracker_init_kwargs(["tensorboard", "wandb", "mlflow", "aim"], tmp_path / "run", 11, "abc123")
    assert kwargs["tensorboard"] == {"purge_step": 11}  # events of steps >= 11 from a killed session are hidden
    assert kwargs["wandb"] == {"dir": str(tmp_path / "run" / "trackers"), "name": "run", "id": "abc123",
                               "resume": "allow"}  # fmt: skip
    assert kwargs["mlflow"]["logging_dir"] == str(tmp_path / "run" / "trackers" / "mlflow")
    assert "aim" not in kwargs  # Accelerate hands it the logging folder, OUTPUT_DIR/trackers


def test_tracker_names_are_accelerates(monkeypatch):
    assert {"tensorboard", "wandb", "mlflow", "aim", "comet_ml"} <= set(tracker_names())
    assert "all" not in tracker_names()
    check_tracker_names(["tensorboard", "comet_ml"])
    with pytest.raises(ValueError, match=r"^log_with: unknown tracker 'wandbb' \(did you mean wandb\?\); trackers: "):
        check_tracker_names(["wandbb"])


def test_a_tracker_that_is_not_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(accelerate.tracking, "get_available_trackers", lambda: ["tensorboard"])
    check_trackers_installed(["tensorboard"])
    with pytest.raises(UsageError) as info:
        check_trackers_installed(["tensorboard", "wandb"])
    assert str(info.value) == "run.log_with=wandb needs the wandb package: pip install wandb"


@pytest.mark.parametrize(
    ("configured", "recorded", "launcher", "passed", "says"),
    [
        (None, None, None, None, None),  # nothing set: Accelerate's default ("no")
        (None, None, "bf16", None, None),  # the launcher's choice: Accelerate reads ACCELERATE_MIXED_PRECISION
        ("fp16", None, None, "fp16", None),
        ("bf16", None, "BF16", "bf16", None),
        ("no", None, "bf16", "no", "mixed precision no: run.mixed_precision=no (set in the config) wins over the "
         "launcher's bf16 (ACCELERATE_MIXED_PRECISION, accelerate launch --mixed_precision)"),
        (None, "bf16", None, "bf16", None),  # a resumed run keeps the precision it recorded
        ("bf16", "bf16", None, "bf16", None),
        (None, "bf16", "no", "bf16", "mixed precision bf16: the run's (config.json 'mixed_precision'), not the "
         "launcher's no"),
    ],
)  # fmt: skip
def test_which_mixed_precision_wins(configured, recorded, launcher, passed, says):
    chosen, line = choose_precision(configured, recorded, launcher)
    assert chosen == passed
    assert (line is None) if says is None else line.startswith(says), line


def test_a_resume_in_another_precision_is_refused():
    with pytest.raises(ResumeConfigError, match=r"^--resume with run.mixed_precision=fp16 where the run trained in"):
        choose_precision("fp16", "bf16", None)


def test_the_recorded_precision_of_old_and_new_run_folders():
    assert recorded_precision({"mixed_precision": "bf16", "config": {"run": {"mixed_precision": None}}}) == "bf16"
    assert recorded_precision({"config": {"run": {"mixed_precision": "fp16"}}}) == "fp16"  # before it was recorded
    assert recorded_precision({"config": {"mixed_precision": "no"}}) == "no"  # a flat layout
    assert recorded_precision({"config": {"run": {}}}) is None
