"""deq_core.train.checkpoints / state / rundir / run_config: the step counter, checkpoint folders (written aside and
renamed; listing, pruning, resolving), reading checkpoint files without running anything, random states, the run lock
and the config file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import ExampleConfig as Config
from deq_core.train.checkpoints import (
    CheckpointError,
    CheckpointWriter,
    atomic_checkpoint_dir,
    checkpoint_path,
    checkpoint_weights,
    latest_complete_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    read_json,
    resolve_checkpoint,
)
from deq_core.train.run_config import check_resume_config, config_changes, load_config, save_config
from deq_core.train.state import TrainState


@dataclasses.dataclass(frozen=True)
class DictConfig:
    """A config with its own ``to_dict`` (what the task packages' configs have)."""

    width: int = 4

    def to_dict(self) -> dict[str, object]:
        return {"width": self.width}


def make_run(root: Path, steps: tuple[int, ...] = (5, 10, 20)) -> Path:
    save_config(Config(), root, "test")
    for step in steps:
        with atomic_checkpoint_dir(root, step) as ckpt:
            ckpt.save_json("train_state.json", {"step": step})
    return root


def test_train_state_round_trips_through_a_checkpoint_file(tmp_path: Path) -> None:
    state = TrainState()
    assert state.step == 0 and state.state_dict() == {"step": 0, "metrics_lines": 0, "metrics_digest": ""}
    state.step = 42
    CheckpointWriter(tmp_path).save_json("state.json", state.state_dict())
    loaded = TrainState()
    loaded.load_state_dict(read_json(tmp_path / "state.json"))
    assert loaded.step == 42 and isinstance(loaded.step, int)


def test_checkpoint_names_sort_by_step(tmp_path: Path) -> None:
    assert checkpoint_path(tmp_path, 100) == tmp_path / "checkpoints" / "step_0000100"
    assert checkpoint_path(str(tmp_path), 3) == tmp_path / "checkpoints" / "step_0000003"
    make_run(tmp_path, steps=(100, 9, 10, 1000))
    (tmp_path / "checkpoints" / "step_notes.txt").write_text("not a folder")
    (tmp_path / "checkpoints" / "tmp_0000050").mkdir()
    (tmp_path / "checkpoints" / "step_0002000").mkdir()  # written in place and interrupted: no manifest
    (tmp_path / "checkpoints" / "step_0003000.partial").mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_0000009", "step_0000010", "step_0000100", "step_0001000",
    ]  # fmt: skip
    assert latest_complete_checkpoint(tmp_path) == checkpoint_path(tmp_path, 1000)


def test_no_checkpoints(tmp_path: Path) -> None:
    assert list_checkpoints(tmp_path / "missing") == [] and latest_complete_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoints").mkdir()
    assert list_checkpoints(tmp_path) == [] and latest_complete_checkpoint(tmp_path) is None
    prune_checkpoints(tmp_path, 1)  # nothing to delete is fine


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    make_run(tmp_path, steps=(5, 10, 20, 40))
    (checkpoint_path(tmp_path, 5) / "model.safetensors").write_bytes(b"x")  # folders with files go too
    prune_checkpoints(tmp_path, 3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_0000010", "step_0000020", "step_0000040"]
    prune_checkpoints(tmp_path, 5)
    assert len(list_checkpoints(tmp_path)) == 3
    prune_checkpoints(tmp_path, 1)
    assert list_checkpoints(tmp_path) == [checkpoint_path(tmp_path, 40)]
    assert (tmp_path / "config.json").is_file()  # nothing but checkpoints is touched
    with pytest.raises(ValueError, match="keep_checkpoints must be >= 1, got 0"):
        prune_checkpoints(tmp_path, 0)
    assert list_checkpoints(tmp_path) == [checkpoint_path(tmp_path, 40)]


def test_resolve_a_run_or_a_checkpoint_folder(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    assert resolve_checkpoint(run) == (run, checkpoint_path(run, 20))
    assert resolve_checkpoint(checkpoint_path(run, 10)) == (run, checkpoint_path(run, 10))
    assert resolve_checkpoint(str(run)) == (run, checkpoint_path(run, 20))


def test_resolve_errors_say_what_is_expected(tmp_path: Path) -> None:
    empty_run = make_run(tmp_path / "empty", steps=())
    with pytest.raises(FileNotFoundError, match="has no complete checkpoint under"):
        resolve_checkpoint(empty_run)
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        resolve_checkpoint(tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError, match="neither a run directory"):  # inside a run, but not saved
        resolve_checkpoint(checkpoint_path(empty_run, 7))
    checkpoint_path(empty_run, 7).mkdir(parents=True)  # a save interrupted by an older version
    with pytest.raises(CheckpointError, match="not a complete checkpoint .* pass the run directory"):
        resolve_checkpoint(checkpoint_path(empty_run, 7))
    stray = tmp_path / "a" / "b" / "step_0000001"
    stray.mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"RUN/checkpoints/step_N"):
        resolve_checkpoint(stray)


def test_checkpoint_weights(tmp_path: Path) -> None:
    folder = checkpoint_path(make_run(tmp_path), 20)
    with pytest.raises(FileNotFoundError, match="is not a complete checkpoint"):
        checkpoint_weights(folder)
    (folder / "model.safetensors").write_bytes(b"weights")
    assert checkpoint_weights(folder) == folder / "model.safetensors"


def test_config_round_trip(tmp_path: Path) -> None:
    cfg = Config(lr=3e-4, solver="broyden", sizes=(4, 5, 6), name="wt103")
    path = save_config(cfg, tmp_path / "new" / "run", "preset-a")
    assert path == tmp_path / "new" / "run" / "config.json"
    saved = json.loads(path.read_text())
    assert saved["name"] == "preset-a" and saved["config"] == {**dataclasses.asdict(cfg), "sizes": [4, 5, 6]}
    name, loaded = load_config(tmp_path / "new" / "run", Config)
    assert (name, loaded) == ("preset-a", cfg) and isinstance(loaded.sizes, tuple)
    save_config(DictConfig(7), tmp_path / "d", "dict")
    assert load_config(tmp_path / "d", DictConfig) == ("dict", DictConfig(7))


def test_load_config_drops_removed_keys_and_defaults_new_ones(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"config": {"lr": 0.5, "removed_key": 1}}))
    assert load_config(tmp_path, Config) == ("?", Config(lr=0.5))
    with pytest.raises(FileNotFoundError, match="is .* the output directory of a training run"):
        load_config(tmp_path / "missing", Config)


def test_config_changes_skip_resumable_keys() -> None:
    saved, current = Config(), Config(lr=1.0, jitter=True, sizes=(3,))
    assert config_changes(saved, current) == {"lr": (1e-3, 1.0), "sizes": ((1, 2), (3,)), "jitter": (False, True)}
    assert config_changes(saved, current, {"jitter", "sizes"}) == {"lr": (1e-3, 1.0)}
    assert config_changes(saved, Config(jitter=True), frozenset({"jitter"})) == {}
    assert config_changes(DictConfig(1), DictConfig(2)) == {"width": (1, 2)}


def test_check_resume_config(tmp_path: Path) -> None:
    check_resume_config(tmp_path, Config(lr=9.0))  # no config.json yet: a new run
    save_config(Config(), tmp_path, "test")
    check_resume_config(tmp_path, Config(jitter=True), {"jitter"})
    with pytest.raises(ValueError, match=r"different config than the run in .*: lr: 0.001 -> 9.0, steps: 10 -> 3\."):
        check_resume_config(tmp_path, Config(lr=9.0, steps=3, jitter=True), {"jitter"})
