"""bf16 autocast through Accelerate (CPU): the DEQ trains, its solver statistics stay finite, the loss goes down.

Each run is a fresh process: Accelerate's state (and so its mixed-precision mode) is fixed once per process."""

import math

from conftest import run_module
from deq_core.train.metrics import read_metrics


def _train_losses(tmp_path, precision):
    out = tmp_path / precision
    proc = run_module(
        "deq_lm.train", "--config", "tiny-deq-transformer", "--output-dir", str(out), "steps=10",
        f"mixed_precision={precision}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [r for r in read_metrics(out / "metrics.jsonl") if r["split"] == "train"]


def test_bf16_mixed_precision_deq_run(tmp_path):
    records = _train_losses(tmp_path, "bf16")
    assert len(records) == 10
    for r in records:
        assert all(math.isfinite(r[k]) for k in ("loss", "nfe_forward", "nfe_backward", "residual"))
    assert records[-1]["loss"] < records[0]["loss"]
    # the same run in float32 gives different numbers: bf16 autocast really was on
    fp32 = _train_losses(tmp_path, "no")
    assert [r["loss"] for r in fp32] != [r["loss"] for r in records]
