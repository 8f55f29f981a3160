"""Two CPU processes under ``accelerate launch`` join one run (Accelerator(cpu=True)) and write one metrics file, and
one set of TensorBoard files (``run.log_with=tensorboard``) holding its numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deq_core.train.testing.trackers import assert_tensorboard_matches_metrics, tensorboard_hparams


def test_two_cpu_processes_train_one_run(cifar_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "-m", "deq_vision.train", "--config", "tiny-mdeq", "--data-dir", str(cifar_dir),
        "--output-dir", str(out), "--threads", "1", "run.log_with=tensorboard",
    ]  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 process(es)" in done.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4]
    assert (out / "checkpoints" / "step_0000004" / "model.safetensors").is_file()
    # The main process alone logs to TensorBoard: each step once, the values of metrics.jsonl, the config.
    assert_tensorboard_matches_metrics(out, "tiny-mdeq", {"train/loss", "train/nfe_forward", "eval/acc"})
    hparams = tensorboard_hparams(out / "trackers" / "tiny-mdeq")
    assert hparams["num_processes"] == 2 and hparams["data.dataset"] == "cifar10"
