"""Experiment trackers and the launcher's mixed precision on a tiny run: TensorBoard's event files hold the
values of metrics.jsonl at the same steps (each step once, also after a resume) and the config as hyperparameters;
a tracker that is not installed is one line; the launcher's precision applies unless the config sets one, and a
resumed run keeps the precision it recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from deq_core.train.metrics import read_metrics
from deq_toy import train
from deq_toy.configs import load_config

pytest.importorskip("tensorboard")
from deq_core.train.testing.trackers import assert_tensorboard_matches_metrics, tensorboard_hparams  # noqa: E402

OPTIONS = ["--config", "synthetic-tiny", "--no-progress"]
SETTINGS = ["run.save_every=10", "run.keep_checkpoints=2"]
REQUIRED = {"train/loss", "train/nfe_forward", "valid/mse"}


def _assert_events_match_metrics(run: Path) -> None:
    assert_tensorboard_matches_metrics(run, "synthetic-tiny", REQUIRED)


def _hparams(run: Path) -> dict[str, object]:
    return tensorboard_hparams(run / "trackers" / "synthetic-tiny")


def test_tensorboard_gets_the_metrics_and_the_config_and_continues_on_resume(tmp_path, capsys):
    run = tmp_path / "run"
    assert train.main([*OPTIONS, "--output-dir", str(run), *SETTINGS, "run.log_with=tensorboard"]) == 0
    _assert_events_match_metrics(run)
    hparams = _hparams(run)
    assert hparams["optim.lr"] == pytest.approx(5e-3) and hparams["run.log_with"] == "('tensorboard',)"
    assert hparams["mixed_precision"] == "no" and hparams["run.mixed_precision"] == "none"
    assert hparams["deq.max_iter"] == load_config("synthetic-tiny").deq.max_iter and hparams["num_processes"] == 1

    # As if the run was killed before its last checkpoint: the events of steps 11-20 are already written, and the
    # resumed run (from step 10) logs them again; TensorBoard must show each step once, with the new values.
    shutil.rmtree(run / "checkpoints" / "step_0000020")
    assert train.main([*OPTIONS, "--output-dir", str(run), "--resume", *SETTINGS, "run.log_with=tensorboard"]) == 0
    assert "resumed from" in capsys.readouterr().out
    assert max(r["step"] for r in read_metrics(run / "metrics.jsonl")) == 20
    _assert_events_match_metrics(run)
    assert len(list((run / "trackers" / "synthetic-tiny").glob("events.out.tfevents.*"))) == 2  # the same folder


def test_a_tracker_that_is_not_installed_is_one_line(tmp_path, capsys):
    if find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    out = tmp_path / "run"
    assert train.main([*OPTIONS, "--output-dir", str(out), *SETTINGS, "run.log_with=tensorboard,wandb"]) == 2
    err = capsys.readouterr().err
    assert err == "python -m deq_toy.train: error: run.log_with=wandb needs the wandb package: pip install wandb\n"
    assert not out.exists()  # nothing was started


def _train(tmp_path: Path, *args: str, launcher: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if launcher is not None:
        env["ACCELERATE_MIXED_PRECISION"] = launcher  # what accelerate launch --mixed_precision sets
    options = [a for a in args if a.startswith("--") or a.isdigit()]
    settings = [a for a in args if a not in options]
    command = [sys.executable, "-m", "deq_toy.train", *OPTIONS, "--output-dir", str(tmp_path / "run"), *options]
    command += [*SETTINGS, *settings]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 2), proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _recorded(tmp_path: Path, name: str) -> str:
    return json.loads((tmp_path / "run" / name).read_text())["mixed_precision"]


def test_the_launchers_precision_applies_and_a_resume_keeps_it(tmp_path):
    proc = _train(tmp_path, "--stop-after", "10", launcher="bf16")
    assert "mixed precision" not in proc.stdout  # the config does not set it: nothing to say
    assert _recorded(tmp_path, "config.json") == "bf16"
    proc = _train(tmp_path, "--resume", launcher="no")  # e.g. accelerate launch without --mixed_precision
    lines = [line for line in proc.stdout.splitlines() if line.startswith("mixed precision")]
    assert lines == [
        "mixed precision bf16: the run's (config.json 'mixed_precision'), not the launcher's no "
        "(ACCELERATE_MIXED_PRECISION, accelerate launch --mixed_precision): a resumed run keeps its precision"
    ]
    assert _recorded(tmp_path, "summary.json") == "bf16"


def test_a_precision_set_in_the_config_wins_with_one_line(tmp_path):
    proc = _train(tmp_path, "--stop-after", "5", "run.mixed_precision=no", launcher="bf16")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("mixed precision")]
    assert len(lines) == 1 and lines[0].startswith("mixed precision no: run.mixed_precision=no (set in the config)")
    assert "wins over the launcher's bf16" in lines[0]
    assert _recorded(tmp_path, "config.json") == "no"
    proc = _train(tmp_path, "--resume", "run.mixed_precision=bf16")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "python -m deq_toy.train: error: --resume with run.mixed_precision=bf16 where the run trained in no "
        "(config.json 'mixed_precision'): resume with run.mixed_precision=no or unset, or train in another "
        "--output-dir."
    ]
