"""The run folder: one run at a time, no silent restart or empty resume, config.json written
after the data are checked and kept on resume, a half-written metrics line or an interrupted save does not stop a
resume; links, a deleted lock and a damaged log, train state or config are one line (``faults.RUN_FOLDER_FAULTS``)."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import write_tiny_corpus
from deq_core.train.checkpoints import checkpoint_path
from deq_core.train.metrics import read_metrics
from deq_core.train.rundir import RunLock
from deq_core.train.testing.faults import RUN_FOLDER_FAULTS, check_run_folder_fault, read_only
from deq_lm.evaluate import main as evaluate_main
from deq_lm.train import main

ARGS = ["--config", "tiny-lm-deq-transformer", "steps=6", "eval_every=3", "dropout=0.1"]


def _one_line_error(capsys, *expected: str) -> None:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_metrics(run / "metrics.jsonl")]


@pytest.fixture
def corpus(tmp_path: Path) -> list[str]:
    return ["--data-dir", str(write_tiny_corpus(tmp_path / "corpus"))]


def test_a_locked_folder_gives_a_one_line_error(tmp_path: Path, corpus: list[str], capsys) -> None:
    out = tmp_path / "run"
    with RunLock(out):  # another run trains there
        assert main([*ARGS, *corpus, "--output-dir", str(out)]) == 2
    _one_line_error(capsys, "is in use by another training run", "another --output-dir")
    assert not (out / "metrics.jsonl").exists() and not (out / "config.json").exists()


def test_no_silent_restart_and_no_empty_resume(tmp_path: Path, corpus: list[str], capsys) -> None:
    out = tmp_path / "run"
    assert main([*ARGS, *corpus, "--output-dir", str(tmp_path / "missing"), "--resume"]) == 2
    _one_line_error(capsys, "--resume: no complete checkpoint in")
    assert not (tmp_path / "missing").exists()
    assert main([*ARGS, *corpus, "--output-dir", str(out)]) == 0
    before = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main([*ARGS, *corpus, "--output-dir", str(out)]) == 2
    _one_line_error(capsys, "already holds a run", "pass --resume")
    assert (out / "metrics.jsonl").read_text() == before


def test_config_is_written_after_the_data_are_checked(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main([*ARGS, "--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (out / "config.json").exists()


def test_resume_with_another_data_dir_keeps_the_config_and_records_the_change(tmp_path: Path, corpus) -> None:
    out = tmp_path / "run"
    assert main([*ARGS, "stop_after=3", *corpus, "--output-dir", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    moved = tmp_path / "moved"
    shutil.copytree(corpus[1], moved)
    assert main([*ARGS, "--data-dir", str(moved), "--output-dir", str(out), "--resume"]) == 0
    after = json.loads((out / "config.json").read_text())
    assert after["config"] == saved["config"]
    changes = {"run.stop_after": [3, 0], "data.data_dir": [corpus[1], str(moved)]}
    assert after["resumed"] == [{"step": 3, "changes": changes}]


def test_resume_with_another_thread_count_is_recorded_and_said_in_one_line(tmp_path: Path, corpus, capsys) -> None:
    """--threads changes the rounding; the run records torch's thread count, and a resume with
    another one is recorded in "resumed" with one console line (bit-identical resumption is lost)."""
    out, threads = tmp_path / "run", torch.get_num_threads()
    try:
        assert main([*ARGS, "stop_after=3", *corpus, "--output-dir", str(out), "--threads", "1"]) == 0
        assert json.loads((out / "config.json").read_text())["torch_threads"] == 1
        capsys.readouterr()
        assert main([*ARGS, *corpus, "--output-dir", str(out), "--resume", "--threads", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    lines = [line for line in capsys.readouterr().out.splitlines() if "torch thread" in line]
    assert lines == [
        "resuming with 2 torch thread(s) where the run used 1: bit-identical resumption is lost (the rounding "
        "differs; recorded in config.json under 'resumed'); resume with 1 thread(s) to keep it"
    ]
    after = json.loads((out / "config.json").read_text())
    assert after["resumed"] == [{"step": 3, "changes": {"run.stop_after": [3, 0], "torch_threads": [1, 2]}}]
    assert after["torch_threads"] == 1


def test_a_half_written_metrics_line_and_an_interrupted_save_do_not_stop_a_resume(
    tmp_path: Path, corpus: list[str], capsys
) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert main([*ARGS, *corpus, "--output-dir", str(full)]) == 0
    assert main([*ARGS, "stop_after=3", *corpus, "--output-dir", str(cut)]) == 0
    with (cut / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "split": "train", "lo')  # killed while writing the line of step 4
    shutil.copytree(checkpoint_path(cut, 3), checkpoint_path(cut, 5))  # killed while saving step 5 (in place)
    (checkpoint_path(cut, 5) / "checkpoint.json").unlink()
    shutil.copytree(checkpoint_path(cut, 3), cut / "checkpoints" / "step_0000005.partial")
    assert evaluate_main(["--checkpoint", str(cut), "--no-sweep"]) == 0  # the newest complete one
    capsys.readouterr()
    assert main([*ARGS, *corpus, "--output-dir", str(cut), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "dropped a half-written last line" in out and "resumed from" in out and "step_0000003" in out
    assert _metrics(cut) == _metrics(full)  # the first line after the resume is step 4's, as uninterrupted
    assert not (cut / "checkpoints" / "step_0000005.partial").exists()


def test_a_read_only_output_folder_is_one_line(tmp_path: Path, corpus: list[str], capsys) -> None:
    """train into a read-only --output-dir is one line, exit status 2, nothing written (``faults.read_only``:
    also for root, whom chmod does not stop)."""
    ro = tmp_path / "read-only"
    ro.mkdir()
    with read_only(ro):
        assert main([*ARGS, *corpus, "--output-dir", str(ro)]) == 2
    _one_line_error(capsys, f"cannot write to {ro}: ", "choose a writable --output-dir")
    assert list(ro.iterdir()) == []


def test_evaluate_in_a_read_only_run_folder_is_one_line_before_the_sweep(tmp_path: Path, corpus, capsys) -> None:
    """The sweep's outputs go to the run folder: read-only, one line before sweeping; --output-dir puts them
    elsewhere."""
    out = tmp_path / "run"
    assert main([*ARGS, *corpus, "--output-dir", str(out)]) == 0
    sweep = ["--checkpoint", str(out), "--max-iters", "1,2", "--tols", "0.1"]
    capsys.readouterr()
    with read_only(out):
        assert evaluate_main(sweep) == 2
        refused = capsys.readouterr()
        assert evaluate_main([*sweep, "--output-dir", str(tmp_path / "sweep")]) == 0
    assert "max_iter" not in refused.out  # refused before the sweep, not after it
    assert refused.err.count("\n") == 1 and "Traceback" not in refused.err, refused.err
    assert f"cannot write to {out}: " in refused.err and "choose a writable --output-dir" in refused.err
    assert not (out / "sweep.json").exists() and (tmp_path / "sweep" / "sweep.json").is_file()


def test_evaluate_replaces_links_planted_at_its_outputs_and_never_writes_through_them(tmp_path: Path, corpus) -> None:
    """sweep.json / sweep.png linked to files outside the run are replaced by the run's own files;
    the files outside keep their content."""
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    assert main([*ARGS, "steps=3", *corpus, "--output-dir", str(out)]) == 0
    elsewhere.mkdir()
    for name in ("sweep.json", "sweep.png"):
        (elsewhere / name).write_text("outside\n")
        (out / name).symlink_to(elsewhere / name)
    assert evaluate_main(["--checkpoint", str(out), "--max-iters", "1,2", "--tols", "0.1"]) == 0
    for name in ("sweep.json", "sweep.png"):
        assert (elsewhere / name).read_text() == "outside\n", name
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["max_iter"] for r in rows[:2]] == [1, 2]  # then the tolerance row


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A run stopped after 4 of its 6 steps, and the options that train it (the settings last)."""
    root = tmp_path_factory.mktemp("lm")
    args = ["--data-dir", str(write_tiny_corpus(root / "corpus")), *ARGS]
    assert main([*args, "run.stop_after=4", "--output-dir", str(root / "run")]) == 0
    return root / "run", args


@pytest.mark.parametrize("fault", RUN_FOLDER_FAULTS)
def test_a_run_folder_made_unusable_is_one_line_and_nothing_outside_touched(
    stopped_run: tuple[Path, list[str]], tmp_path: Path, capsys, fault: str
) -> None:
    stopped, args = stopped_run
    check_run_folder_fault(fault, lambda argv: main([*args, *argv]), stopped, tmp_path, lambda: capsys.readouterr().err)
