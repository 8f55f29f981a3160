"""Training: a few steps lower the loss; the CLI runs on tiny data, writes metrics.jsonl and checkpoints, resumes to
the same weights as an uninterrupted run; the evaluation CLI sweeps hard stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file

import deq_core
import deq_vision  # noqa: F401
from deq_vision import evaluate, train
from deq_vision.models import default_deq

METRIC_KEYS = {"step", "split", "loss", "acc", "nfe_forward", "nfe_backward", "residual", "lr"}


@pytest.mark.parametrize("jacobian", [False, True])
def test_a_few_steps_lower_the_loss(jacobian: bool) -> None:
    torch.manual_seed(0)
    model = timm.create_model("mdeq_mini", num_classes=3, in_chans=3, deq=default_deq(6, 6), dropout=0.0)
    model.train()
    x = torch.randn(12, 3, 16, 16)
    y = torch.arange(12) % 3
    x = x + y[:, None, None, None].float()  # a learnable signal
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        with deq_core.use_plan(model, deq_core.Plan(jacobian_loss=jacobian)):
            logits, info = model(x, return_info=True)
        loss = torch.nn.functional.cross_entropy(logits, y)
        total = loss + 0.5 * info.jacobian_loss if jacobian else loss
        opt.zero_grad()
        total.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.7 * losses[0], losses


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_cli_trains_writes_metrics_and_checkpoints_and_resumes(
    cifar_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--config", "tiny-mdeq-jr", "--data-dir", str(cifar_dir)]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train.main([*common, "--output-dir", str(straight)]) == 0
    out = capsys.readouterr().out
    assert out.count("step 1: unrolled pretraining done") == 1
    (final,) = [line for line in out.splitlines() if line.startswith("final (step 4)")]
    assert "eval acc" in final
    assert final.endswith(f"chance level: acc 10 % (uniform guess over 10 classes); outputs in {straight}")
    assert train.main([*common, "--output-dir", str(resumed), "stop_after=2"]) == 0
    assert [p.name for p in (resumed / "checkpoints").iterdir()] == ["step_0000002"]
    assert train.main([*common, "--output-dir", str(resumed), "--resume"]) == 0

    records = _records(resumed)
    steps = [r["step"] for r in records if r["split"] == "train"]
    assert steps == [1, 2, 3, 4]
    assert records[0]["mode"] == "unrolled" and records[1]["mode"] == "solve"
    assert METRIC_KEYS <= set(records[1]) and "jacobian_loss" in records[1]
    assert [r["step"] for r in records if r["split"] == "eval"] == [2, 4]
    assert (resumed / "training.png").is_file()
    a = load_file(str(straight / "checkpoints" / "step_0000004" / "model.safetensors"))
    b = load_file(str(resumed / "checkpoints" / "step_0000004" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5), key

    assert evaluate.main(["--checkpoint", str(resumed), "--data-dir", str(cifar_dir), "--max-steps", "3"]) == 0
    rows = json.loads((resumed / "hard_stop.json").read_text())["rows"]
    assert [r["max_iter"] for r in rows] == [1, 2, 3]
    assert [r["nfe_forward"] for r in rows] == [1.0, 2.0, 3.0]


def test_cli_trains_the_resnet_baseline_with_mixup_and_ema(cifar_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "resnet"
    args = ["--config", "tiny-resnet", "--data-dir", str(cifar_dir), "--output-dir", str(out)]
    assert train.main([*args, "mixup=0.2", "cutmix=1.0", "label_smoothing=0.1", "ema_decay=0.9", "augment=true"]) == 0
    records = _records(out)
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4]
    assert [r["step"] for r in records if r["split"] == "eval_ema"] == [2, 4]
    assert "nfe_forward" not in records[0] and 0 <= records[-1]["acc"] <= 100
    assert json.loads((out / "summary.json").read_text())["step"] == 4


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = train.main(["--config", "tiny-mdeq", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "r")])
    assert code == 2 and "cifar-10-batches-py" in capsys.readouterr().err
    code = train.main(["--config", "tiny-mdeq", "max_iterr=3"])
    assert code == 2 and "unknown config key" in capsys.readouterr().err
    code = evaluate.main(["--checkpoint", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("python -m deq_vision.evaluate: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stepz=3", "unknown config key 'stepz' (did you mean optim.steps?); sections: data, model, deq, optim, run;"),
        ("optim.stepz=3", "unknown config section 'optim' key 'stepz'; valid keys: batch_size, grad_accum, lr,"),
        ("data=3", "'data' is a config section: set one of its keys, data.dataset=..."),
        ("image_size=0", "data.image_size must be a number >= 1, got 0."),
        ("model.dropout=1.5", "model.dropout must be in [0, 1) or None, got 1.5."),
        ("optim.lr=abc", "'optim.lr=abc': Value 'abc' of type 'str' could not be converted to Float."),
        ("run.log_every=0", "run.log_every must be a number >= 1, got 0."),
        ("data.image_size=1e30", "data.image_size must be an integer from 1 to 2**31 - 1 = 2147483647, got 1e+30."),
        ("deq.pretrain_depth=1e30", "deq.pretrain_depth must be an integer from 1 to 2**31 - 1 = 2147483647, got 1e"),
        ("run.dist_timeout=1e30", "run.dist_timeout must be at most 604800 seconds (a week), got 1e+30."),
        ("--threads 100000", "--threads must be a number of threads from 1 to "),
    ],
)
def test_bad_settings_are_one_line_errors(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown key or a bad value in a section: one line naming the dotted key, exit status 2, before any data."""
    code = train.main(["--config", "tiny-mdeq", *override.split()])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def test_no_progress_bar_redraws_in_a_log_file_and_tqdm_disable_is_honoured(cifar_dir: Path, tmp_path: Path) -> None:
    """stderr redirected to a file (not a terminal): no carriage-return redraws, the evaluation lines still printed."""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    call = [sys.executable, "-m", "deq_vision.train", "--config", "tiny-resnet", "--data-dir", str(cifar_dir)]
    proc = subprocess.run([*call, "--output-dir", str(tmp_path / "r")], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr, proc.stderr[-500:]
    assert "step 2: eval" in proc.stdout and "step 4: eval" in proc.stdout


@pytest.mark.parametrize(
    ("option", "value"),
    [("--batch-size", "0"), ("--batch-size", "-1"), ("--max-steps", "0"), ("--threads", "100000"),
     ("--max-steps", "1000000000")],  # a sweep of 10**9 evaluations: a run that never ends
)  # fmt: skip
def test_evaluate_refuses_numbers_that_mean_nothing(
    cifar_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    run = tmp_path / "run"
    assert train.main(["--config", "tiny-mdeq", "steps=1", "--data-dir", str(cifar_dir), "--output-dir", str(run)]) == 0
    capsys.readouterr()
    code = evaluate.main(["--checkpoint", str(run), "--data-dir", str(cifar_dir), option, value])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"python -m deq_vision.evaluate: error: {option} must be a "), err
    assert err.count("\n") == 1 and f"got {value}" in err, err


@pytest.mark.parametrize("setting", ["model.name=nosuch", "optim.opt=nosuch", "optim.sched=nosuch"])
def test_a_name_that_timm_or_the_registry_refuses_is_one_line(
    cifar_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str
) -> None:
    """The ValueError raised while the parts are built (the registry's, timm's optimizer or scheduler factory's)."""
    args = ["--config", "tiny-mdeq", "--data-dir", str(cifar_dir), "--output-dir", str(tmp_path / "run"), "steps=1"]
    assert train.main([*args, setting]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_vision.train: error: the run cannot be built from its settings: "), err
    assert err.count("\n") == 1 and "nosuch" in err and not (tmp_path / "run").exists(), err


def test_a_run_that_diverges_stops_with_one_line(cifar_dir: Path, tmp_path: Path, capsys) -> None:
    """optim.lr=1e30: the first step gives NaN, which the DEQ solve reports as a FloatingPointError."""
    args = ["--config", "tiny-mdeq", "steps=2", "optim.lr=1e30", "--data-dir", str(cifar_dir)]
    assert train.main([*args, "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_vision.train: error: training diverged at step "), err
    assert err.count("\n") == 1 and "a lower optim.lr (it is 1e+30)" in err, err
