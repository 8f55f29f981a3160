"""The files of a run folder: nothing is written through a symbolic link planted in the folder, and a full
device, a folder that cannot be written, a manifest nested too deep or a metrics file that is not text is one line
``PROG: error: ...`` with exit status 2, leaving the last complete checkpoint usable and no temporary file behind.

The training command line runs in this process (``run_training_cli`` with the skeleton's tiny task), so that the tests
inject the failures from outside the training code: a full device is an ``os.fsync`` (the call every write of a run
ends with) that fails with ENOSPC, a read-only folder is ``faults.read_only`` (chmod, and for root, whom chmod does not
stop, failing writes under the folder with EROFS)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from deq_core.train.checkpoints import (
    CheckpointError,
    CheckpointWriter,
    checkpoint_path,
    latest_complete_checkpoint,
    resolve_checkpoint,
)
from deq_core.train.cli import run_training_cli, training_parser
from deq_core.train.files import (
    OutputError,
    append_text,
    check_new_folder,
    output_error,
    write_file,
    write_folder,
    write_json,
)
from deq_core.train.metrics import read_metrics
from deq_core.train.overrides import apply_overrides
from deq_core.train.rundir import RunDirError, RunLock
from deq_core.train.testing.faults import read_only, save_points
from deq_core.train.trackers import check_tracker_folders

sys.path.insert(0, str(Path(__file__).parent))
import skeleton_task  # noqa: E402
from skeleton_task import TinyConfig, run  # noqa: E402

BASE = TinyConfig(steps=8, save_every=4, eval_every=4, pretrain_steps=2)


def _cli(out: Path, *argv: str) -> int:
    """``prog --output-dir OUT [ARGV...]`` of a training command line built on the skeleton's tiny task."""
    parser = training_parser("prog", "Train the tiny task.", ["tiny"], default="tiny", threads=False)
    return run_training_cli(
        parser, ["--output-dir", str(out), *argv], lambda args: apply_overrides(BASE, args.overrides),
        lambda cfg, output_dir, args: run(cfg, output_dir, resume=args.resume),
    )  # fmt: skip


def _one_line(capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("prog: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


def _stopped_run(out: Path) -> None:
    """A run stopped (with a checkpoint) after 4 of its 8 steps."""
    assert _cli(out, "stop_after=4") == 0
    assert latest_complete_checkpoint(out) == checkpoint_path(out, 4)


def _temporary_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".partial" in p.name or p.name.endswith(".tmp"))


# ------------------------------------------------------------------------------------------------ symbolic links


def test_a_lock_file_linked_outside_is_refused_and_the_target_untouched(tmp_path: Path, capsys) -> None:
    out, outside = tmp_path / "run", tmp_path / "outside.txt"
    _stopped_run(out)
    outside.write_text("not the run's\n")
    (out / ".lock").unlink()
    (out / ".lock").symlink_to(outside)
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{out / '.lock'} is a symbolic link", "delete the link")
    assert outside.read_text() == "not the run's\n"


def test_outputs_replace_links_planted_in_the_run_and_never_write_through_them(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _stopped_run(out)
    elsewhere.mkdir()
    saved_config = (out / "config.json").read_text()
    planted = {  # a link in the run folder -> the file outside it, and what that file holds
        "summary.json": "summary outside\n",
        "training.png": "png outside\n",
        "config.json": saved_config,  # the run reads it (a copy of its own), then records the resume in it
        "config.json.partial": "config partial outside\n",  # the fixed temporary names of earlier versions
        "metrics.jsonl.partial": "metrics partial outside\n",
    }
    for name, text in planted.items():
        (elsewhere / name).write_text(text)
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(elsewhere / name)
    assert _cli(out, "--resume") == 0  # stop_after changes (4 -> 0): config.json records the resume
    for name, text in planted.items():
        assert (elsewhere / name).read_text() == text, name
    for name in ("summary.json", "training.png", "config.json"):
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert json.loads((out / "config.json").read_text())["resumed"][0]["step"] == 4


def test_a_checkpoint_folder_linked_outside_is_removed_not_written_into(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _stopped_run(out)
    (elsewhere / "kept").mkdir(parents=True)
    (elsewhere / "kept" / "file").write_text("outside\n")
    for name in ("step_0000008.partial", "step_0000008.old"):  # the folders of the next save, linked outside
        (out / "checkpoints" / name).symlink_to(elsewhere / "kept", target_is_directory=True)
    assert _cli(out, "--resume") == 0
    assert [p.name for p in (elsewhere / "kept").iterdir()] == ["file"]
    # the links are gone; the run keeps RunConfig's default of 2 checkpoints
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_0000004", "step_0000008"]


def test_a_metrics_file_linked_outside_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    out, outside = tmp_path / "run", tmp_path / "outside.jsonl"
    _stopped_run(out)
    outside.write_text('{"step": 1, "split": "elsewhere"}\n' * 20)
    before = outside.read_bytes()
    (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").symlink_to(outside)
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{out / 'metrics.jsonl'} is a symbolic link")
    assert outside.read_bytes() == before
    with pytest.raises(OutputError, match="is a symbolic link"):
        append_text(out / "metrics.jsonl", "{}\n")
    assert outside.read_bytes() == before


def test_a_hard_link_at_the_lock_file_is_refused_and_the_other_file_untouched(tmp_path: Path, capsys) -> None:
    out, outside = tmp_path / "run", tmp_path / "outside.txt"
    _stopped_run(out)
    outside.write_text("not the run's\n")
    (out / ".lock").unlink()
    os.link(outside, out / ".lock")
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{out / '.lock'} is a hard link (one file with 2 names", "replace it with a copy")
    assert outside.read_text() == "not the run's\n"


def test_a_file_written_in_place_is_never_a_hard_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("outside\n")
    os.link(outside, tmp_path / "metrics.jsonl")
    with pytest.raises(OutputError, match="metrics.jsonl is a hard link"):
        append_text(tmp_path / "metrics.jsonl", "{}\n")
    assert outside.read_text() == "outside\n"


def test_a_checkpoints_folder_linked_outside_is_refused_and_nothing_there_touched(tmp_path: Path, capsys) -> None:
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _stopped_run(out)
    (out / "checkpoints").rename(elsewhere)
    for name in ("notes.partial", "step_0000002.old"):  # names the clean-up of a run deletes (the second) or did
        (elsewhere / name).mkdir()
    before = sorted(p.name for p in elsewhere.iterdir())
    (out / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{out / 'checkpoints'} is a symbolic link", "choose another --output-dir")
    assert sorted(p.name for p in elsewhere.iterdir()) == before


def test_a_run_deletes_only_the_leftovers_it_names_itself(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    for name in ("notes.partial", "backup.old", "step_0000006.partial", "step_0000007.old"):
        (out / "checkpoints" / name).mkdir()
    assert _cli(out, "--resume") == 0
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["backup.old", "notes.partial", "step_0000004", "step_0000008"]


@pytest.mark.parametrize("link", ["trackers", "trackers/tiny"])
def test_a_trackers_folder_linked_outside_is_refused_and_nothing_written_there(tmp_path: Path, capsys, link) -> None:
    pytest.importorskip("tensorboard")
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / link).parent.mkdir(parents=True)
    (out / link).symlink_to(elsewhere, target_is_directory=True)
    assert _cli(out, "log_with=tensorboard") == 2
    _one_line(capsys, f"{out / link} is a symbolic link", "choose another --output-dir")
    assert list(elsewhere.iterdir()) == []


def test_check_tracker_folders_refuses_a_link_at_the_trackers_folder_or_in_it(tmp_path: Path) -> None:
    check_tracker_folders(tmp_path)  # nothing there yet
    (tmp_path / "trackers" / "wandb").mkdir(parents=True)
    check_tracker_folders(tmp_path)
    (tmp_path / "trackers" / "mlflow").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(OutputError, match="trackers/mlflow is a symbolic link"):
        check_tracker_folders(tmp_path)


# --------------------------------------------------------------------------------------------------- full device


def _enospc_under(fragment: str):
    """A save point (``faults.save_points``) that fails the first ``os.fsync`` of a path containing ``fragment``
    with ENOSPC, as a device that fills up while the file is written."""

    def point(call: str, path: str) -> None:
        if call == "fsync" and fragment in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return point


def test_a_full_device_during_a_checkpoint_is_one_line_and_the_last_checkpoint_resumes(tmp_path: Path, capsys):
    out = tmp_path / "run"
    _stopped_run(out)
    first = sum(p.stat().st_size for p in checkpoint_path(out, 4).iterdir())
    capsys.readouterr()
    with save_points(out, _enospc_under("step_0000008.partial")):
        assert _cli(out, "--resume") == 2
    err = _one_line(capsys, f"no space left on the device of {out / 'checkpoints'} to write checkpoint step_0000008",
                    "the size of step_0000004", "step_0000004, the last complete one, is kept", "--resume")  # fmt: skip
    assert f"{first / 1000:.1f} kB" in err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_0000004"]  # the partial save is gone
    assert _cli(out, "--resume") == 0  # space again: the run resumes from step 4 and finishes
    assert latest_complete_checkpoint(out) == checkpoint_path(out, 8)
    straight = tmp_path / "straight"
    assert _cli(straight) == 0
    drop = ("items_per_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(out / "metrics.jsonl")] == [
        {k: v for k, v in r.items() if k not in drop} for r in read_metrics(straight / "metrics.jsonl")
    ]


def test_a_full_device_for_the_first_checkpoint_or_the_summary_is_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with save_points(out, _enospc_under("step_0000004.partial")):
        assert _cli(out, "stop_after=4") == 2
    _one_line(capsys, "to write checkpoint step_0000004", "choose another --output-dir")
    assert list((out / "checkpoints").iterdir()) == []
    _stopped_run(out)  # nothing to resume there: a new run may start
    capsys.readouterr()
    with save_points(out, _enospc_under(".summary.json.")):
        assert _cli(out, "--resume") == 2
    _one_line(capsys, f"no space left on the device of {out} to write summary.json, which needs ",
              "free space there or choose another --output-dir")  # fmt: skip
    assert _temporary_files(out) == [] and not (out / "summary.json").exists()


def test_a_write_that_fails_is_removed_and_the_old_file_kept(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_json(path, {"old": 1})
    with save_points(tmp_path, _enospc_under(".summary.json.")):
        with pytest.raises(OutputError, match=r"to write summary.json, which needs 14 bytes; free space there"):
            write_json(path, {"new": 2})
    assert json.loads(path.read_text()) == {"old": 1} and _temporary_files(tmp_path) == []

    def bug(tmp: Path) -> None:
        tmp.write_text("half")
        raise KeyError("not a failure to write")

    with pytest.raises(KeyError):  # anything else is raised as it is, and the temporary file removed too
        write_file(path, bug)
    assert json.loads(path.read_text()) == {"old": 1} and _temporary_files(tmp_path) == []


class _FullDevice(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails every write with ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return len(data)


class _Usage:
    def __init__(self, free: int) -> None:
        self.total, self.used, self.free = 1 << 30, 1 << 30, free


def test_writers_that_hide_the_errno_are_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save reports a failed write to a file object as a RuntimeError raised while handling the OSError;
    writers that keep no errno at all (torch.save to a file name, safetensors) failed for lack of space when the
    device is (nearly) full."""
    with pytest.raises(RuntimeError) as raised:
        torch.save({"w": torch.zeros(100_000)}, io.BufferedWriter(_FullDevice(5000)))
    assert "No space left on device" not in str(raised.value)  # torch's own message does not say why
    assert str(output_error(tmp_path / "model.pt", raised.value)).startswith("no space left on the device of")
    bare = RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file")
    assert output_error(tmp_path / "model.pt", bare) is None  # a device with space left: not a full one
    monkeypatch.setattr("shutil.disk_usage", lambda path: _Usage(free=0))
    message = str(output_error(tmp_path / "model.pt", bare, needed="about 2.0 MB"))
    assert message.startswith(f"no space left on the device of {tmp_path} to write model.pt, which needs about 2.0 MB")


def test_checkpoint_files_are_new_files_never_written_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"outside")
    (tmp_path / "x.pt").symlink_to(outside)
    with pytest.raises(FileExistsError):
        CheckpointWriter(tmp_path).save_torch("x.pt", {"a": torch.ones(1)})
    assert outside.read_bytes() == b"outside"


# ------------------------------------------------------------------------------------------- read-only folders


def test_a_read_only_output_folder_is_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    with read_only(out):
        assert _cli(out) == 2
    _one_line(capsys, f"cannot write to {out}: ", "choose a writable --output-dir")
    assert list(out.iterdir()) == []
    with read_only(tmp_path):  # the folder to create is in a read-only one
        assert _cli(tmp_path / "new") == 2
    _one_line(capsys, f"cannot write to {tmp_path / 'new'}: ", "choose a writable --output-dir")


def test_a_read_only_run_folder_on_resume_is_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    files = lambda: {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}  # noqa: E731
    before = files()
    capsys.readouterr()
    with read_only(out):  # (a user other than root may still write the files in it: .lock takes its pid)
        assert _cli(out, "--resume") == 2
    _one_line(capsys, f"cannot write to {out}: ", "choose a writable --output-dir")
    assert files() == before


def test_an_output_path_that_is_a_file_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert _cli(tmp_path / "file") == 2
    _one_line(capsys, "choose a")
    with pytest.raises(OutputError, match=f"cannot write to {tmp_path / 'file'}: it is a file, not a folder"):
        write_json(tmp_path / "file" / "x.json", {})


# ------------------------------------------------------------------------------------------ files the run reads


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_manifest_nested_too_deep_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    manifest = checkpoint_path(out, 4) / "checkpoint.json"
    manifest.write_text(_nested(200_000))
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{manifest} is not a valid manifest")


@pytest.mark.parametrize("name", ["config.json", "checkpoints/step_0000004/train_state.json"])
def test_json_files_nested_too_deep_are_one_line_naming_them(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    (out / name).write_text(_nested(200_000))
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, str(out / name))


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b'{"step": 1}\n\xff\xfe\x00binary\n', "metrics.jsonl:2 is not UTF-8 text"),
     (_nested(200_000).encode() + b"\n", "metrics.jsonl:1 is JSON nested too deeply")],
)  # fmt: skip
def test_a_metrics_file_that_is_not_a_log_is_one_line_on_resume(tmp_path: Path, capsys, content, expected) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    (out / "metrics.jsonl").write_bytes(content)
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, expected)
    assert (out / "metrics.jsonl").read_bytes() == content  # left as it was


@pytest.mark.parametrize("resume", [False, True])
def test_a_metrics_file_that_is_a_folder_is_one_line_and_left_as_it_is(tmp_path: Path, capsys, resume: bool) -> None:
    """A folder named metrics.jsonl in a new run's folder, or in place of a stopped run's log."""
    out = tmp_path / "run"
    if resume:
        _stopped_run(out)
        (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").mkdir(parents=True)
    (out / "metrics.jsonl" / "notes.txt").write_text("a user's file")
    capsys.readouterr()
    assert _cli(out, *(["--resume"] if resume else [])) == 2
    _one_line(capsys, f"{out / 'metrics.jsonl'} is not a regular file (a folder, ", "move it away")
    assert [p.name for p in (out / "metrics.jsonl").iterdir()] == ["notes.txt"]


# ------------------------------------------------------------------------------------ one run in a folder, its past


def test_a_deleted_lock_file_does_not_let_a_second_run_in(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with RunLock(out):  # a run trains there
        (out / ".lock").unlink()
        assert _cli(out) == 2
        _one_line(capsys, f"{out} is in use by another training run", "another --output-dir")
        assert not (out / "config.json").exists()
        with pytest.raises(RunDirError, match="in use by another training run"):
            with RunLock(out):
                pass


@pytest.mark.parametrize("damage", ["deleted", "emptied", "cut"])
def test_a_resume_whose_metrics_lines_are_missing_is_one_line(tmp_path: Path, capsys, damage: str) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    log = out / "metrics.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    if damage == "deleted":
        log.unlink()
    else:
        log.write_bytes(b"" if damage == "emptied" else b"".join(lines[:3]))
    found = {"deleted": "does not exist", "emptied": "has 0 complete line(s)", "cut": "has 3 complete line(s)"}
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{log} {found[damage]}, but the checkpoint to resume from counted {len(lines)} lines",
              "restore the file")  # fmt: skip
    assert json.loads((out / "config.json").read_text()).get("resumed") is None  # nothing recorded


@pytest.mark.parametrize("damage", ["reordered", "edited", "another run's", "count lowered", "count removed"])
def test_a_resume_whose_metrics_lines_differ_from_the_checkpoints_is_one_line(
    tmp_path: Path, capsys, damage: str
) -> None:
    """The checkpoint keeps the digest of the lines it counted: a log reordered, edited or replaced by another run's
    (with as many lines or more), or a line count lowered or removed in train_state.json, is one line and nothing is
    written; never a resume that goes on with other lines, or fewer, without a word."""
    out = tmp_path / "run"
    _stopped_run(out)
    log, state = out / "metrics.jsonl", checkpoint_path(out, 4) / "train_state.json"
    lines, saved = log.read_bytes().splitlines(keepends=True), json.loads(state.read_text())
    if damage == "reordered":
        log.write_bytes(b"".join(reversed(lines)))
    elif damage == "edited":
        log.write_bytes(json.dumps({**json.loads(lines[0]), "loss": 123.0}).encode() + b"\n" + b"".join(lines[1:]))
    elif damage == "another run's":
        log.write_text("".join(json.dumps({"step": i, "split": "train", "loss": 0.5}) + "\n" for i in range(9)))
    elif damage == "count lowered":
        state.write_text(json.dumps({**saved, "metrics_lines": len(lines) - 1}))
    else:
        state.write_text(json.dumps({k: v for k, v in saved.items() if k != "metrics_lines"}))
    damaged = log.read_bytes()
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    if damage == "count removed":
        _one_line(capsys, f"{state} cannot be read as tensors and plain data (KeyError: 'metrics_lines')")
    else:
        count = len(lines) - (damage == "count lowered")
        _one_line(capsys, f"the first {count} lines of {log} are not those the checkpoint to resume from was saved")
    assert log.read_bytes() == damaged and json.loads((out / "config.json").read_text()).get("resumed") is None


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_rank0.pt"])
def test_a_state_file_holding_other_tensors_is_one_line_on_resume(tmp_path: Path, capsys, name: str) -> None:
    """A checkpoint's state file replaced by another torch.save file of tensors and plain data (loadable, but not the
    optimizer's, the schedule's or the random generators' state): one line naming the file, not a KeyError."""
    out = tmp_path / "run"
    _stopped_run(out)
    path = checkpoint_path(out, 4) / name
    torch.save({"x": torch.zeros(3)}, path)
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{path} cannot be read as tensors and plain data (KeyError: ")


def test_a_resume_from_a_train_state_with_another_step_is_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    state = checkpoint_path(out, 4) / "train_state.json"
    data = json.loads(state.read_text())
    state.write_text(json.dumps({**data, "step": 2}))
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"{state} says step 2, but the checkpoint's checkpoint.json says step 4")


def test_a_deleted_config_is_restored_from_the_checkpoint_and_checked(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    saved = json.loads((out / "config.json").read_text())
    (out / "config.json").unlink()
    capsys.readouterr()
    assert _cli(out, "--resume", "lr=0.01") == 2
    _one_line(capsys, "--resume with a different config", "lr: 0.03 -> 0.01")
    assert json.loads((out / "config.json").read_text()) == saved  # recreated from the checkpoint's copy
    (out / "config.json").unlink()
    assert _cli(out, "--resume") == 0
    assert "config.json was missing: restored from the copy in" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["config"] == saved["config"]


def test_a_config_changed_since_the_checkpoint_is_one_line_on_resume_and_when_read(tmp_path: Path, capsys) -> None:
    """config.json edited after the run started, with the command line agreeing (so that the resume check of the
    settings passes): the checkpoint's copy disagrees, and the resume, or reading the checkpoint to evaluate or export
    it, is one line naming the setting; nothing is written."""
    out = tmp_path / "run"
    _stopped_run(out)
    path = out / "config.json"
    data = json.loads(path.read_text())
    data["config"]["lr"] = 0.01
    path.write_text(json.dumps(data))
    before = sorted(p.name for p in out.rglob("*"))
    capsys.readouterr()
    assert _cli(out, "--resume", "lr=0.01") == 2
    copy = checkpoint_path(out, 4) / "run_config.json"
    _one_line(capsys, f"{path} differs from {copy}, the copy saved with the checkpoint (config.lr: 0.03 -> 0.01)")
    assert sorted(p.name for p in out.rglob("*")) == before
    for where in (out, checkpoint_path(out, 4)):
        with pytest.raises(CheckpointError, match=r"config.lr: 0.03 -> 0.01"):
            resolve_checkpoint(where)


def test_a_resumed_run_keeps_its_config_checked_against_each_checkpoint(tmp_path: Path, capsys) -> None:
    """A resume adds to config.json's "resumed" list only; the run stays readable and resumable."""
    out = tmp_path / "run"
    _stopped_run(out)
    data = json.loads((out / "config.json").read_text())
    data["resumed"] = [{"step": 4, "changes": {"torch_threads": [1, 2]}}]
    (out / "config.json").write_text(json.dumps(data))
    assert resolve_checkpoint(out) == (out, checkpoint_path(out, 4))
    assert _cli(out, "--resume") == 0


def test_a_resume_without_config_or_its_copy_is_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _stopped_run(out)
    (out / "config.json").unlink()
    (checkpoint_path(out, 4) / "run_config.json").unlink(missing_ok=True)
    manifest = checkpoint_path(out, 4) / "checkpoint.json"  # a checkpoint of an earlier version: no copy
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "files": [f for f in data["files"] if f != "run_config.json"]}))
    capsys.readouterr()
    assert _cli(out, "--resume") == 2
    _one_line(capsys, f"--resume: {out / 'config.json'} is missing, and a resumed run checks its settings against it")


def test_an_export_deletes_only_the_leftover_of_an_interrupted_export(tmp_path: Path) -> None:
    """``write_folder`` writes OUT.partial first: a folder of that name that it did not leave (the user's own) is
    refused and kept whole; one that an interrupted export left (a kill: here an interrupt the write lets through) is
    replaced by the next export, and OUT holds the written files only."""
    out, partial = tmp_path / "out", tmp_path / "out.partial"
    partial.mkdir()
    (partial / "notes.txt").write_text("mine")
    write = lambda folder: (folder / "weights.bin").write_bytes(b"1234")  # noqa: E731
    with pytest.raises(OutputError, match="exists and was not left by an interrupted export"):
        write_folder(out, write)
    assert [p.name for p in partial.iterdir()] == ["notes.txt"] and not out.exists()
    (partial / "notes.txt").unlink()
    partial.rmdir()

    def interrupted(folder: Path) -> None:
        (folder / "weights.bin").write_bytes(b"12")
        raise KeyboardInterrupt  # as a kill, nothing of the export's is cleaned up

    with pytest.raises(KeyboardInterrupt):
        write_folder(out, interrupted)
    assert partial.is_dir() and not out.exists()
    assert write_folder(out, write) == out
    assert sorted(p.name for p in out.iterdir()) == ["weights.bin"] and not partial.exists()


@pytest.mark.parametrize("ask", ["torch", "python"])
def test_a_run_that_needs_more_memory_than_the_machine_has_is_one_line(tmp_path: Path, capsys, ask: str) -> None:
    """A size below the integer limit can still be more than the machine's memory: torch's allocator failing (a
    RuntimeError) or a MemoryError is one line, exit status 2. Both requests fail before anything is allocated."""
    parser = training_parser("prog", "Train the tiny task.", ["tiny"], default="tiny", threads=False)

    def train(cfg, output_dir, args):
        torch.empty(2**62, dtype=torch.uint8) if ask == "torch" else bytearray(2**62)

    assert run_training_cli(parser, ["--output-dir", str(tmp_path / "run")], lambda args: None, train) == 2
    _one_line(capsys, "not enough memory for this run (", "lower the sizes (optim.batch_size")


def test_other_runtime_errors_are_not_taken_for_a_lack_of_memory(tmp_path: Path) -> None:
    parser = training_parser("prog", "Train the tiny task.", ["tiny"], default="tiny", threads=False)

    def train(cfg, output_dir, args):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_training_cli(parser, ["--output-dir", str(tmp_path / "run")], lambda args: None, train)


def test_a_setting_the_tasks_parts_refuse_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """A name the model registry, timm's optimizers or schedules do not know is a ValueError raised while the task
    builds its parts (deq_vision.train optim.opt=nosuch was a traceback): one line; the folder the run made is gone."""

    def refuse(self, accelerator):
        raise ValueError("unknown model 'nosuch': use one of ['tiny']")

    monkeypatch.setattr(skeleton_task.TinyTask, "build", refuse)
    assert _cli(tmp_path / "run") == 2
    _one_line(capsys, "prog: error: the run cannot be built from its settings: unknown model 'nosuch': use one of")
    assert not (tmp_path / "run").exists()


def test_a_folder_name_the_terminal_cannot_show_is_escaped(tmp_path: Path, monkeypatch) -> None:
    """With an ASCII terminal (PYTHONIOENCODING=ascii), the last line of a run in ``runs/été`` was a
    UnicodeEncodeError traceback, after every file was written; the name is now escaped."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    parser = training_parser("prog", "Train the tiny task.", ["tiny"], default="tiny", threads=False)
    train = lambda cfg, output_dir, args: print(f"outputs in {output_dir}")  # noqa: E731
    assert run_training_cli(parser, ["--output-dir", str(tmp_path / "été")], lambda args: None, train) == 0
    out.flush()
    assert out.buffer.getvalue().decode("ascii").endswith("\\xe9t\\xe9\n")


def test_a_checkpoint_folder_named_with_dots_is_found(tmp_path: Path, monkeypatch) -> None:
    """``RUN/checkpoints/step_N/../step_N`` and ``.`` (run in the checkpoint folder) name the checkpoint folder."""
    out = tmp_path / "run"
    _stopped_run(out)
    folder = checkpoint_path(out, 4)
    assert resolve_checkpoint(folder / ".." / folder.name) == (out, folder)
    monkeypatch.chdir(folder)
    assert resolve_checkpoint(".") == (out, folder)


def test_a_new_run_never_replaces_files_that_no_run_wrote(tmp_path: Path, capsys) -> None:
    """A careless ``--output-dir .`` in a project folder: its own config.json (or, without one, a summary.json) would
    be replaced by the run's; refused in one line, the files kept. A folder left by a run that stopped before its
    first checkpoint (a run's config.json, its log) is reused."""
    out = tmp_path / "project"
    out.mkdir()
    mine = {"config.json": '{"my": "settings"}\n', "summary.json": "my summary\n"}
    for name, text in mine.items():
        (out / name).write_text(text)
    capsys.readouterr()
    assert _cli(out) == 2
    _one_line(
        capsys, f"{out} holds files that a new run would replace and that no run wrote (config.json, summary.json)"
    )
    (out / "config.json").unlink()
    assert _cli(out) == 2
    _one_line(capsys, "that no run wrote (summary.json): move them away")
    assert {p.name: p.read_text() for p in out.iterdir() if p.name != ".lock"} == {"summary.json": "my summary\n"}
    left = tmp_path / "left"
    _stopped_run(left)
    for folder in (left / "checkpoints").iterdir():
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
    assert _cli(left) == 0  # no checkpoint: a new run, over the files of the run before


def test_a_new_run_never_replaces_a_finished_run_whose_checkpoints_were_deleted(tmp_path: Path, capsys) -> None:
    """A run that finished keeps its results (summary.json, metrics.jsonl) when its checkpoints are deleted to save
    space: a new run in its folder is refused in one line instead of replacing them without a word."""
    out = tmp_path / "run"
    assert _cli(out) == 0
    for folder in (out / "checkpoints").iterdir():
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
    kept = {name: (out / name).read_bytes() for name in ("config.json", "metrics.jsonl", "summary.json")}
    capsys.readouterr()
    assert _cli(out) == 2
    _one_line(capsys, f"{out} holds a run that finished (summary.json) and whose checkpoints are gone")
    assert {name: (out / name).read_bytes() for name in kept} == kept


@contextlib.contextmanager
def _readers_released(fifo: Path) -> Iterator[list[str]]:
    """While the block runs, a thread opens ``fifo`` for writing whenever a reader waits on it, and closes it at once
    (the reader then sees an empty file and goes on); the list yielded names each release: a reader that blocked."""
    released: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO when no reader waits
            except OSError:
                continue
            released.append(str(fifo))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield released
    finally:
        done.set()
        thread.join()


def test_a_fifo_at_a_checkpoint_manifest_is_never_opened(tmp_path: Path, capsys) -> None:
    """A FIFO at checkpoint.json would block the reader of the manifest forever (a resume, an evaluation): the
    checkpoint is incomplete, said in one line, and the FIFO is never opened."""
    out = tmp_path / "run"
    _stopped_run(out)
    manifest = checkpoint_path(out, 4) / "checkpoint.json"
    manifest.unlink()
    os.mkfifo(manifest)
    capsys.readouterr()
    with _readers_released(manifest) as released:
        assert _cli(out, "--resume") == 2
        with pytest.raises(FileNotFoundError, match="has no complete checkpoint"):
            resolve_checkpoint(out)
    assert released == []
    _one_line(capsys, "--resume: no complete checkpoint in ")


def test_names_longer_than_the_system_takes_are_one_line(tmp_path: Path, capsys) -> None:
    """A run folder, a checkpoint or an export named past the system's limit (255 bytes a name here): one line."""
    long = tmp_path / ("x" * 300)
    assert _cli(long) == 2
    _one_line(capsys, "File name too long")
    with pytest.raises(FileNotFoundError, match="is neither a run directory"):
        resolve_checkpoint(long)
    for out in (long, tmp_path / ("y" * 250)):  # too long itself, or its OUT.partial
        with pytest.raises(OutputError, match="File name too long"):
            write_folder(out, lambda folder: None)
        with pytest.raises(OutputError, match="File name too long"):  # what an export checks before it loads a run
            check_new_folder(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
