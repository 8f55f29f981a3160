"""Two CPU processes under ``accelerate launch`` join (gloo) and compute the same gradients as one process with the
same global batch."""

import dataclasses
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import free_port, subprocess_env
from deq_core.experiment import read_metrics
from deq_lm.configs import get_config
from deq_lm.train import train

SETTINGS = ["steps=2", "save_grads_at=1", "batch_size=8", "dropout=0", "jac_weight=0", "eval_every=2"]


def test_two_process_cpu_run_matches_one_process_gradients(tmp_path):
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        "-m", "deq_lm.train", "--config", "tiny-deq-transformer", "--output-dir", str(tmp_path / "two"), *SETTINGS,
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout  # the processes joined: each trained on half the global batch
    assert "final (step 2)" in proc.stdout

    cfg = get_config("tiny-deq-transformer")
    one = dataclasses.replace(cfg, steps=2, save_grads_at=1, batch_size=8, dropout=0.0, jac_weight=0.0, eval_every=2)
    train(one, tmp_path / "one")

    g2 = load_file(str(tmp_path / "two" / "grads_step1.safetensors"))
    g1 = load_file(str(tmp_path / "one" / "grads_step1.safetensors"))
    assert g1.keys() == g2.keys() and len(g1) > 10
    for name in g1:
        assert torch.allclose(g1[name], g2[name], rtol=1e-4, atol=1e-6), (name, (g1[name] - g2[name]).abs().max())
    assert any(g.abs().max() > 1e-3 for g in g1.values())  # non-trivial gradients
    # The same first-step loss, averaged over the two processes.
    loss = {
        d: [r["loss"] for r in read_metrics(tmp_path / d / "metrics.jsonl") if r["split"] == "train"]
        for d in ("one", "two")
    }
    assert loss["one"][0] == pytest.approx(loss["two"][0], rel=1e-5)


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
    cfg = dataclasses.replace(
        get_config("tiny-deq-transformer"), steps=1, save_grads_at=1, batch_size=8, dropout=0.0, jac_weight=0.0
    )
    train(cfg, tmp_path / "full")
    train(dataclasses.replace(cfg, grad_accum=4), tmp_path / "accum")
    a = load_file(str(tmp_path / "full" / "grads_step1.safetensors"))
    b = load_file(str(tmp_path / "accum" / "grads_step1.safetensors"))
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-6), name
