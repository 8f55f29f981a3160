"""The training skeleton (deq_core.train.trainer) on a tiny task: it learns, prints the story of the run, resumes
bit-exactly, accumulates gradients exactly, and joins two CPU processes under ``accelerate launch``."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

import deq_core
from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.metrics import read_metrics
from deq_core.train.testing.faults import edit_saved_config
from deq_core.train.trainer import micro_batches, schedule_at

sys.path.insert(0, str(Path(__file__).parent))
from skeleton_task import TinyConfig, run  # noqa: E402

TIMING_KEYS = ("items_per_s",)
WEIGHTS = "model.safetensors"


def _train_lines(path: Path, key: str) -> list[float]:
    return [r[key] for r in read_metrics(path / "metrics.jsonl") if r["split"] == "train"]


def test_a_deq_learns_and_the_console_tells_the_story(tmp_path, capsys):
    summary = run(TinyConfig(steps=40), tmp_path / "run")
    out = capsys.readouterr().out
    losses = _train_lines(tmp_path / "run", "loss")
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses
    modes = _train_lines(tmp_path / "run", "mode")
    assert modes[:3] == ["unrolled"] * 3 and set(modes[3:]) == {"solve"}
    assert out.count("unrolled pretraining done") == 1 and "step 3: unrolled pretraining done" in out
    assert min(_train_lines(tmp_path / "run", "nfe_forward")[3:]) >= 1
    final = [line for line in out.splitlines() if line.startswith("final (step 40)")]
    assert len(final) == 1, out
    assert f"outputs in {tmp_path / 'run'}" in final[0] and "chance level: mse " in final[0]
    assert f"valid mse {summary['valid_mse']:.4f}" in final[0]
    assert (tmp_path / "run" / "training.png").stat().st_size > 1000
    assert (tmp_path / "run" / "summary.json").is_file()


def test_resume_is_bit_exact(tmp_path):
    cfg = TinyConfig(steps=12, save_every=4)  # dropout, Jacobian draws with p=0.5, jittered limits, pretraining
    run(cfg, tmp_path / "straight")
    run(dataclasses.replace(cfg, stop_after=6), tmp_path / "stopped")
    assert latest_complete_checkpoint(tmp_path / "stopped").name.endswith("6")
    assert not (tmp_path / "stopped" / "summary.json").exists()
    run(cfg, tmp_path / "stopped", resume=True)
    a, b = (read_metrics(tmp_path / d / "metrics.jsonl") for d in ("straight", "stopped"))
    assert len(a) == len(b) > 12
    for ra, rb in zip(a, b):
        assert {k: v for k, v in ra.items() if k not in TIMING_KEYS} == {k: rb[k] for k in ra if k not in TIMING_KEYS}
    wa, wb = (load_file(str(latest_complete_checkpoint(tmp_path / d) / WEIGHTS)) for d in ("straight", "stopped"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_refuses_a_changed_config(tmp_path):
    from deq_core.train.run_config import ResumeConfigError

    run(TinyConfig(steps=4, stop_after=2), tmp_path / "r")
    with pytest.raises(ResumeConfigError, match="lr: 0.03 -> 0.1"):
        run(TinyConfig(steps=4, lr=0.1), tmp_path / "r", resume=True)


def _config_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def test_the_thread_count_is_recorded_and_a_resume_with_another_is_said_in_one_line(tmp_path, capsys):
    """The thread count changes the rounding, so the run records it (config.json
    "torch_threads"), and a resume with another count is recorded in "resumed" and said in one line."""
    threads, run_dir = torch.get_num_threads(), tmp_path / "r"
    try:
        torch.set_num_threads(1)
        run(TinyConfig(steps=6, stop_after=2), run_dir)
        assert _config_json(run_dir)["torch_threads"] == 1
        run(TinyConfig(steps=6, stop_after=3), run_dir, resume=True)  # the same count: nothing recorded or said
        assert _config_json(run_dir)["resumed"] == [{"step": 2, "changes": {"stop_after": [2, 3]}}]
        assert "torch thread" not in capsys.readouterr().out
        torch.set_num_threads(2)
        run(TinyConfig(steps=6, stop_after=4), run_dir, resume=True)
        lines = [line for line in capsys.readouterr().out.splitlines() if "torch thread" in line]
        assert lines == [
            "resuming with 2 torch thread(s) where the run used 1: bit-identical resumption is lost (the rounding "
            "differs; recorded in config.json under 'resumed'); resume with 1 thread(s) to keep it"
        ]
        saved = _config_json(run_dir)
        assert saved["resumed"][-1] == {"step": 3, "changes": {"stop_after": [2, 4], "torch_threads": [1, 2]}}
        assert saved["torch_threads"] == 1  # the count the run started with
        edit_saved_config(run_dir, lambda data: data.pop("torch_threads"))  # a run from before the count was kept
        torch.set_num_threads(1)
        run(TinyConfig(steps=6), run_dir, resume=True)
        lines = [line for line in capsys.readouterr().out.splitlines() if "torch thread" in line]
        assert len(lines) == 1 and "the run did not record the count it ran with" in lines[0], lines
        assert _config_json(run_dir)["resumed"][-1]["changes"]["torch_threads"] == [None, 1]
    finally:
        torch.set_num_threads(threads)


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
    cfg = TinyConfig(steps=1, save_grads_at=1, dropout=0.0, jac_weight=0.0, pretrain_steps=0, max_iter_jitter=0)
    run(cfg, tmp_path / "full")
    run(dataclasses.replace(cfg, grad_accum=4), tmp_path / "accum")
    a, b = (load_file(str(tmp_path / d / "grads_step1.safetensors")) for d in ("full", "accum"))
    assert a.keys() == b.keys() and len(a) == 5
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6)
    assert max(float(g.abs().max()) for g in a.values()) > 1e-3


def test_an_explicit_model_trains_without_deq_statistics(tmp_path):
    run(TinyConfig(use_deq=False, steps=6), tmp_path / "mlp")
    record = read_metrics(tmp_path / "mlp" / "metrics.jsonl")[0]
    assert "nfe_forward" not in record and record["mode"] == "solve" and record["jacobian_active"] is False


def test_schedule_at_follows_the_config_sections():
    cfg = TinyConfig(seed=3, max_iter=10, max_iter_jitter=3, pretrain_steps=5, jac_weight=1.0, jac_prob=0.5,
                     grad_accum=2)  # fmt: skip
    grown = dataclasses.replace(cfg.deq, jac_growth=0.5, jac_every=10)
    config = SimpleNamespace(run=cfg.run, optim=cfg.optim, deq=grown)
    plans = [schedule_at(config, s) for s in range(100)]
    assert [p.deq.unroll for p in plans[:6]] == [2, 2, 2, 2, 2, None]
    assert [p.mode for p in plans[4:6]] == ["unrolled", "solve"]
    assert {p.deq.max_iter for p in plans} == {7, 8, 9, 10} and {p.micro_batches for p in plans} == {2}
    assert 20 < sum(p.jacobian for p in plans) < 80 and plans[25].jacobian_weight == 2.0
    assert all(p.jacobian == p.deq.jacobian_loss for p in plans)
    assert plans == [schedule_at(config, s) for s in range(100)]
    steady = schedule_at(
        SimpleNamespace(run=cfg.run, optim=cfg.optim, deq=dataclasses.replace(grown, max_iter_jitter=0)), 9
    )
    assert steady.deq.max_iter is None  # no jitter: every DEQ layer keeps its own limit
    explicit = schedule_at(config, 0, has_deq=False)
    assert explicit.deq == deq_core.Plan() and explicit.mode == "solve" and not explicit.jacobian


def test_micro_batches_split_rows_and_refuse_a_remainder():
    x, y = torch.arange(12).reshape(6, 2), torch.arange(6)
    parts = micro_batches((x, y), 3)
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="5 rows per process cannot be split into 2 micro-batches"):
        micro_batches((x[:5], y[:5]), 2)


def test_a_task_without_steps_is_refused(tmp_path):
    from skeleton_task import TinyTask

    from deq_core.train.trainer import train

    task = TinyTask(TinyConfig())
    task.steps = 0
    with pytest.raises(ValueError, match="a run needs steps >= 1"):
        train(task, TinyConfig(), tmp_path / "r")
    assert not (tmp_path / "r" / "config.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_cpu_processes_cooperate_under_accelerate_launch(tmp_path):
    """accelerate launch --multi_gpu --num_processes 2 on CPU: the processes join (each takes half of every batch)
    and their synchronized gradients equal those of one process on the whole batch."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("ACCELERATE_CONFIG_FILE", None)
    settings = ["steps=2", "save_grads_at=1", "dropout=0", "jac_weight=0", "pretrain_steps=0", "max_iter_jitter=0"]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
        str(Path(__file__).parent / "skeleton_task.py"), str(tmp_path / "two"), *settings,
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout and proc.stdout.count("final (step 2)") == 1
    cfg = TinyConfig(steps=2, save_grads_at=1, dropout=0.0, jac_weight=0.0, pretrain_steps=0, max_iter_jitter=0)
    run(cfg, tmp_path / "one")
    g1, g2 = (load_file(str(tmp_path / d / "grads_step1.safetensors")) for d in ("one", "two"))
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], rtol=1e-4, atol=1e-6)
    first = [_train_lines(tmp_path / d, "loss")[0] for d in ("one", "two")]
    assert first[0] == pytest.approx(first[1], rel=1e-5)


def test_the_jacobian_term_reaches_the_gradients_when_scheduled(tmp_path):
    cfg = TinyConfig(steps=1, save_grads_at=1, dropout=0.0, pretrain_steps=0, max_iter_jitter=0, jac_prob=1.0)
    run(dataclasses.replace(cfg, jac_weight=0.0), tmp_path / "off")
    run(dataclasses.replace(cfg, jac_weight=5.0), tmp_path / "on")
    off, on = (load_file(str(tmp_path / d / "grads_step1.safetensors")) for d in ("off", "on"))
    assert (on["cell.weight"] - off["cell.weight"]).abs().max() > 1e-4
    assert read_metrics(tmp_path / "on" / "metrics.jsonl")[0]["jacobian_active"] is True
    assert "jacobian_loss" in read_metrics(tmp_path / "on" / "metrics.jsonl")[0]


def test_cosine_lr_factor_warms_up_then_decays_to_the_floor():
    from deq_core.train.schedules import cosine_lr_factor

    assert [cosine_lr_factor(s, 10, warmup=2) for s in (0, 1)] == [0.5, 1.0]
    assert cosine_lr_factor(2, 10, warmup=2) == 1.0
    assert cosine_lr_factor(6, 10, warmup=2, min_ratio=0.1) == pytest.approx(0.55)
    assert cosine_lr_factor(10, 10, min_ratio=0.1) == pytest.approx(0.1) == cosine_lr_factor(50, 10, min_ratio=0.1)


def test_a_batch_that_the_processes_cannot_share_is_a_usage_error(tmp_path):
    from skeleton_task import TinyTask

    from deq_core.train.errors import UsageError
    from deq_core.train.trainer import train

    cfg = TinyConfig()  # an optim section that did not check itself (OptimConfig refuses 10 rows in 4 micro-batches)
    config = SimpleNamespace(
        run=cfg.run, optim=SimpleNamespace(batch_size=10, grad_accum=4, grad_clip=0.0), deq=cfg.deq
    )
    with pytest.raises(UsageError, match=r"batch_size \(10\) must be divisible by processes x grad_accum \(1 x 4\)"):
        train(TinyTask(cfg), config, tmp_path / "r")
    assert not (tmp_path / "r" / "config.json").exists()


def test_unconverged_solves_are_counted_and_said_once_at_the_end(tmp_path, capsys):
    """A limit too low to converge (2 or 3 iterations, jittered, at tol 1e-5): no RuntimeWarning in the middle of the
    progress bar;
    each solve-mode train record counts the unconverged fraction, one line at the end sums them up, and the final
    line names the train and the validation NFE. An evaluation during unrolled pretraining says that it solved."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run(TinyConfig(steps=10, max_iter=3, max_iter_jitter=1, pretrain_steps=3, eval_every=2),
                      tmp_path / "run")  # fmt: skip
    out = capsys.readouterr().out
    assert not [w for w in caught if "stopped unconverged" in str(w.message)], [str(w.message) for w in caught]
    train = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert all("unconverged" not in r for r in train if r["mode"] == "unrolled")
    solved = [r["unconverged"] for r in train if r["mode"] == "solve"]
    assert len(solved) == 7 and all(0 < f <= 1 for f in solved), solved
    said = [line for line in out.splitlines() if line.startswith("unconverged solves during training")]
    assert len(said) == 1 and "forward in 7 of 7 logged steps" in said[0], out
    final = [line for line in out.splitlines() if line.startswith("final (step 10)")]
    valid_nfe = f", valid NFE {summary['valid_nfe_forward']:.1f}"  # the layer's eval limit, not the training one
    assert len(final) == 1 and ", train NFE forward " in final[0] and " / backward " in final[0], final
    assert valid_nfe in final[0], final
    during = [line for line in out.splitlines() if line.startswith("step 2: valid")]
    assert len(during) == 1 and "training is still unrolled" in during[0], during
    after = [line for line in out.splitlines() if line.startswith("step 4: valid")]
    assert len(after) == 1 and "still unrolled" not in after[0], after


def test_converged_runs_say_nothing_about_unconverged_solves(tmp_path, capsys):
    run(TinyConfig(steps=8, max_iter=60, max_iter_jitter=0, dropout=0.0), tmp_path / "run")
    out = capsys.readouterr().out
    train = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert [r["unconverged"] for r in train if r["mode"] == "solve"] == [0.0] * 5
    assert "unconverged solves" not in out
