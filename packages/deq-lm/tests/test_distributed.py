"""Two CPU processes under ``accelerate launch`` join (gloo) and compute the same gradients as one process with the
same global batch; the main process alone logs to TensorBoard (``run.log_with=tensorboard``)."""

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import free_port, subprocess_env, write_tiny_corpus
from deq_core.train.metrics import read_metrics
from deq_core.train.run_config import replace_config
from deq_core.train.testing.trackers import assert_tensorboard_matches_metrics, tensorboard_hparams
from deq_lm.configs import get_config
from deq_lm.train import train

SETTINGS = ["steps=2", "save_grads_at=1", "batch_size=8", "dropout=0", "deq.jac_weight=0", "eval_every=2"]


def test_two_process_cpu_run_matches_one_process_gradients(tmp_path):
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        "-m", "deq_lm.train", "--config", "tiny-deq-transformer", "--output-dir", str(tmp_path / "two"), *SETTINGS,
        "run.log_with=tensorboard",
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout  # the processes joined: each trained on half the global batch
    assert "final (step 2)" in proc.stdout
    # TensorBoard: each step once, the values of metrics.jsonl, the config as hyperparameters.
    assert_tensorboard_matches_metrics(tmp_path / "two", "tiny-deq-transformer", {"train/loss", "valid/acc"})
    hparams = tensorboard_hparams(tmp_path / "two" / "trackers" / "tiny-deq-transformer")
    assert hparams["num_processes"] == 2 and hparams["model.name"] == "deq_transformer"

    cfg = get_config("tiny-deq-transformer")
    one = replace_config(
        cfg, {"steps": 2, "save_grads_at": 1, "batch_size": 8, "dropout": 0.0, "deq.jac_weight": 0.0, "eval_every": 2}
    )
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
    cfg = replace_config(
        get_config("tiny-deq-transformer"),
        {"steps": 1, "save_grads_at": 1, "batch_size": 8, "dropout": 0.0, "deq.jac_weight": 0.0},
    )
    train(cfg, tmp_path / "full")
    train(replace_config(cfg, {"optim.grad_accum": 4}), tmp_path / "accum")
    a = load_file(str(tmp_path / "full" / "grads_step1.safetensors"))
    b = load_file(str(tmp_path / "accum" / "grads_step1.safetensors"))
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-6), name


def test_two_process_language_model_run_carries_each_process_memory(tmp_path):
    """Language modeling: each process trains on its rows of the ordered columns and keeps the memory of its own rows,
    so the gradients and the memories (concatenated over processes) equal one process with all the columns. (Step 1
    only: Adam's first step is about sign(g), which turns 1e-7 differences of near-zero gradients into visible ones.)"""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    settings = ["steps=1", "save_grads_at=1", "dropout=0", "eval_every=1"]
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        "-m", "deq_lm.train", "--config", "tiny-lm-deq-transformer", "--data-dir", str(corpus),
        "--output-dir", str(tmp_path / "two"), *settings,
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout and "final (step 1)" in proc.stdout
    cfg = replace_config(
        get_config("tiny-lm-deq-transformer"),
        {"data.data_dir": str(corpus), "optim.steps": 1, "run.save_grads_at": 1, "model.dropout": 0.0,
         "run.eval_every": 1},
    )  # fmt: skip
    train(cfg, tmp_path / "one")
    g2 = load_file(str(tmp_path / "two" / "grads_step1.safetensors"))
    g1 = load_file(str(tmp_path / "one" / "grads_step1.safetensors"))
    assert g1.keys() == g2.keys()
    for name in g1:
        assert torch.allclose(g1[name], g2[name], rtol=1e-4, atol=1e-6), (name, (g1[name] - g2[name]).abs().max())

    def memory(run: str, rank: int) -> torch.Tensor:
        ((states, injections),) = torch.load(tmp_path / run / "checkpoints" / "step_0000001" / f"memory_rank{rank}.pt")
        assert injections.shape[:2] == states.shape[:2]  # the memory's injection kept beside its states
        return states  # one micro-batch: its memory (rows, mem_len, d_model)

    halves = [memory("two", rank) for rank in (0, 1)]
    assert [h.shape[0] for h in halves] == [2, 2]
    assert torch.allclose(torch.cat(halves), memory("one", 0), rtol=1e-4, atol=1e-5)


def _launch(tmp_path, out, *args):
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        "-m", "deq_lm.train", "--output-dir", str(out), *args,
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_two_process_resume_restores_each_process_memory_and_random_state(tmp_path):
    """Each process saves its own random states and memory (rng_rankR.pt, memory_rankR.pt) and loads them back."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    args = ["--config", "tiny-lm-deq-transformer", "--data-dir", str(corpus)]
    settings = ["steps=4", "eval_every=2", "dropout=0.1"]
    _launch(tmp_path, tmp_path / "full", *args, *settings)
    _launch(tmp_path, tmp_path / "cut", *args, *settings, "stop_after=2")
    saved = {p.name for p in (tmp_path / "cut" / "checkpoints" / "step_0000002").iterdir()}
    assert {"rng_rank0.pt", "rng_rank1.pt", "memory_rank0.pt", "memory_rank1.pt"} <= saved
    assert "resumed from" in _launch(tmp_path, tmp_path / "cut", *args, *settings, "--resume").stdout
    a = load_file(str(tmp_path / "full" / "checkpoints" / "step_0000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "checkpoints" / "step_0000004" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    def metrics(run):
        return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_metrics(run / "metrics.jsonl")]

    assert metrics(tmp_path / "cut") == metrics(tmp_path / "full")
