"""The command-line tools on tiny data: outputs, resume, evaluation sweep, and clear errors."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from deq_core.train.errors import UsageError
from deq_core.train.metrics import read_metrics
from deq_toy import evaluate, reproduce, train
from deq_toy.checkpoint import load_checkpoint
from deq_toy.configs import load_config


def test_train_synthetic_writes_metrics_checkpoint_and_figure(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--config", "synthetic-tiny", "--output-dir", str(out), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    final = [line for line in lines if line.startswith("final (step 20)")]
    assert len(final) == 1 and "valid mse" in final[0]
    assert lines[-1] == final[0]  # the README's promise: the last line printed is the summary
    assert final[0].endswith(f"(predicting the mean); outputs in {out}") and "chance level: mse " in final[0]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rec = [r for r in records if r["split"] == "train"]
    assert {"step", "split", "loss", "mse", "nfe_forward", "nfe_backward", "residual"} <= set(train_rec[-1])
    assert any(r["split"] == "valid" and "mse" in r for r in records)
    assert (out / "figure5.png").stat().st_size > 10_000
    assert (out / "training.png").exists()
    state = load_checkpoint(out)
    assert state["step"] == 20 and set(state) >= {"model", "config"}
    assert all(isinstance(v, torch.Tensor) for v in state["model"].values())


def test_train_arithmetic_deq_writes_metrics_and_residual_plot(tmp_path):
    out, data = tmp_path / "run", tmp_path / "data"
    code = train.main(
        [
            "--config",
            "arith-deq-jac-tiny",
            "--data-dir",
            str(data),
            "--output-dir",
            str(out),
            "--no-progress",
            "epochs=1",
        ]
    )
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["split"] == "train"][-1]
    assert {"loss", "acc", "nfe_forward", "nfe_backward", "residual", "jacobian_loss"} <= set(last)
    results = json.loads((out / "results.json").read_text())
    assert {"test_four", "test_four_biased", "test_two", "test_two_biased"} <= set(results)
    assert (out / "residual.png").exists() and (out / "training.png").exists()
    assert sorted(p.name for p in (data / "arith-seed0").iterdir())[0] == "four-test-len31.tsv"


def test_resume_continues_to_the_same_result(tmp_path):
    args = ["--config", "synthetic-tiny", "--no-progress", "deq.jac_weight=2"]  # RNG used by the Hutchinson probes
    assert train.main(args + ["--output-dir", str(tmp_path / "full")]) == 0
    assert train.main(args + ["--output-dir", str(tmp_path / "split"), "--stop-after", "7"]) == 0
    assert load_checkpoint(tmp_path / "split")["step"] == 7
    assert train.main(args + ["--output-dir", str(tmp_path / "split"), "--resume"]) == 0
    full, split = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "split")
    for key in full["model"]:
        assert torch.allclose(full["model"][key], split["model"][key], atol=1e-6), key
    steps = [json.loads(line)["step"] for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    full_steps = [json.loads(line)["step"] for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert steps == full_steps  # no step logged twice


def test_evaluate_sweeps_solver_limits(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--config", "synthetic-tiny", "--output-dir", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert (
        evaluate.main(
            ["--checkpoint", str(out), "--max-iters", "1,50", "--tols", "1e-3", "--output", str(tmp_path / "e.json")]
        )
        == 0
    )
    rows = json.loads((tmp_path / "e.json").read_text())["sweep"]
    assert [r["max_iter"] for r in rows] == [1, 50]
    assert rows[0]["nfe_forward"] == 1 and rows[1]["residual"] < rows[0]["residual"]


def test_a_sweep_row_is_the_run_rebuilt_with_those_limits(tmp_path, capsys):
    """The sweep sets a deq_core.Plan on the trained layer: each row is what the run gives rebuilt with deq.max_iter
    and deq.tol changed, the task's metric and the eval solver's statistics alike."""
    out = tmp_path / "run"
    assert train.main(["--config", "synthetic-tiny", "--output-dir", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    rows = evaluate.sweep(out, tmp_path, "valid", [3, 50], [1e-2, 1e-5])
    assert [(r["max_iter"], r["tol"]) for r in rows] == [(3, 1e-2), (3, 1e-5), (50, 1e-2), (50, 1e-5)]
    for row in rows:
        changes = {"deq.max_iter": row["max_iter"], "deq.tol": row["tol"]}
        rebuilt = evaluate.evaluate_run(out, tmp_path, "valid", changes)
        assert {k: v for k, v in row.items() if k not in ("max_iter", "tol")} == rebuilt
    assert len({r["nfe_fixed_point_mean"] for r in rows}) > 1  # the limits reach the eval solver's statistics too


def test_reproduce_synthetic_table(tmp_path):
    code = reproduce.main(
        [
            "synthetic",
            "--output-dir",
            str(tmp_path),
            "--no-progress",
            "n_train=256",
            "n_valid=64",
            "epochs=2",
            "batch_size=128",
            "eval_every=4",
        ]
    )
    assert code == 0
    table = (tmp_path / "table.md").read_text()
    assert table.count("\n| ") >= 4 and "| 4 |" in table
    assert (tmp_path / "figure5.png").exists()


INT_MAX = "2**31 - 1 = 2147483647, got 1e+30"  # the largest integer setting, and how 1e30 is shown


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "nope"], "unknown config 'nope'; known configs:"),
        (["--config", "synthetic-tiny", "lr"], "not of the form key=value"),
        (["--config", "synthetic-tiny", "learning_rate=1"], "unknown config key 'learning_rate'; sections: data, "),
        (["--config", "synthetic-tiny", "lrr=1"], "unknown config key 'lrr' (did you mean optim.lr?)"),
        (["--config", "synthetic-tiny", "optim.lrr=1"], "unknown config section 'optim' key 'lrr'; valid keys: batch_"),
        (["--config", "synthetic-tiny", "model=big"], "'model' is a config section: set one of its keys, model.width"),
        (["--config", "synthetic-tiny", "epochs=two"], "'epochs=two': Value 'two' of type 'str' could not"),
        (["--config", "synthetic-tiny", "epochs=0"], "optim.epochs must be a number >= 1, got 0"),
        (["--config", "synthetic-tiny", "optim.lr=-1"], "optim.lr must be > 0, got -1.0"),
        (["--config", "synthetic-tiny", "run.threads=0"], "run.threads must be a number >= 1, got 0"),
        (["--config", "synthetic-tiny", "eval_solver=newton"], "run.eval_solver: unknown solver 'newton'"),
        (["--config", "arith-fc-tiny", "length=30"], "data.length and long_length must be odd and >= 3"),
        (["--config", "arith-fc-tiny", "readout=last"], "model.readout=last applies to the GRU models only"),
        (["--config", "arith-fc-tiny", "model=lstm"], "'model=lstm': Invalid value 'lstm'"),
        (["--config", "synthetic-tiny", "lr=nan"], "optim.lr must be a finite number, got nan"),
        (["--config", "synthetic-tiny", "lr=inf"], "optim.lr must be a finite number, got inf"),
        (["--config", "synthetic-tiny", "deq.tol=inf"], "deq.tol must be a finite number, got inf"),
        (["--config", "synthetic-tiny", "noise_std=inf"], "data.noise_std must be a finite number, got inf"),
        (["--config", "arith-fc-tiny", "weight_decay=nan"], "optim.weight_decay must be a finite number, got nan"),
        (["--config", "arith-fc-tiny", "grad_clip=nan"], "optim.grad_clip must be a finite number, got nan"),
        (["--config", "arith-fc-tiny", "run.seed=4294967296"], "run.seed must be an integer from 0 to 2**32 - 1"),
        (["--config", "synthetic-tiny", "run.log_with=tensorbord"], "run.log_with: unknown tracker 'tensorbord' (did"),
        (["--config", "synthetic-tiny", "run.project=../x"], "run.project must be a name without '/'"),
        (["--config", "synthetic-tiny", "run.dist_timeout=0"], "run.dist_timeout must be a number of seconds > 0"),
        (["--config", "synthetic-tiny", "run.dist_timeout=nan"], "run.dist_timeout must be a finite number, got nan"),
        (["--config", "synthetic-tiny", "run.mixed_precision=fp8"], "Invalid value 'fp8', expected one of ['no', "),
        (["--config", "synthetic-tiny", "model.width=1e30"], f"model.width must be an integer from 1 to {INT_MAX}"),
        (["--config", "synthetic-tiny", "data.n_train=1e30"], f"data.n_train must be an integer from 1 to {INT_MAX}"),
        (["--config", "synthetic-tiny", "run.threads=1e30"], f"run.threads must be an integer from 1 to {INT_MAX}"),
        (["--config", "synthetic-tiny", "run.threads=100000"], "run.threads must be a number of threads from 1 to "),
        (["--config", "synthetic-tiny", "run.dist_timeout=1e30"], "run.dist_timeout must be at most 604800 seconds"),
        (["--config", "synthetic-tiny", "--stop-after", "-1"], "--stop-after must be a whole number >= 0, got -1"),
    ],
)
def test_bad_arguments_give_clear_errors(tmp_path, capsys, argv, message):
    assert train.main(argv + ["--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_toy.train: error: ") and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-iters", "0"), ("--max-iters", "-1"), ("--max-iters", "5,x"), ("--tols", "0"), ("--tols", "-1"),
     ("--tols", "nan"), ("--tols", "inf"), ("--max-iters", "5,2000000000")],  # a limit that would not end
)  # fmt: skip
def test_evaluate_refuses_limits_and_tolerances_that_mean_nothing(tmp_path, capsys, option, value):
    out = tmp_path / "run"
    assert train.main(["--config", "synthetic-tiny", "--output-dir", str(out), "--no-progress", "--stop-after=1"]) == 0
    capsys.readouterr()
    assert evaluate.main(["--checkpoint", str(out), f"{option}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m deq_toy.evaluate: error: {option} takes comma-separated "), err
    assert err.count("\n") == 1 and f"got {value!r}" in err, err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"expression\tvalue\tlabel\n1+2\n", "line 2: expected 3 tab-separated fields, got 1"),
        (b"expression\tvalue\tlabel\n1+2\t3\t1\xff\n", "line 2: not UTF-8 text (byte 30)"),
    ],
)
def test_malformed_data_file_gives_clear_error(tmp_path, capsys, content, message):
    data = tmp_path / "data"
    bad = data / "arith-seed0" / "four-train-len31.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(content)
    code = train.main(["--config", "arith-fc-tiny", "--data-dir", str(data), "--output-dir", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m deq_toy.train: error: malformed arithmetic data file {bad}, {message}. "), err
    assert err.count("\n") == 1 and "delete it" in err, err


def test_a_run_that_diverges_stops_with_one_line(tmp_path, capsys):
    """optim.lr=1e30: the GRU's loss is NaN at once; one line naming the step and the settings to change, exit 2."""
    args = ["--config", "arith-gru-tiny", "--no-progress", "--data-dir", str(tmp_path / "data"), "optim.lr=1e30"]
    assert train.main([*args, "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_toy.train: error: training diverged at step ") and "Traceback" not in err, err
    assert err.count("\n") == 1 and "a lower optim.lr (it is 1e+30)" in err, err


def test_existing_run_needs_resume_and_resume_needs_same_config(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert train.main(["--config", "synthetic-tiny", "--output-dir", out, "--no-progress", "--stop-after", "3"]) == 0
    assert train.main(["--config", "synthetic-tiny", "--output-dir", out]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert train.main(["--config", "synthetic-tiny", "--output-dir", out, "--resume", "lr=0.1"]) == 2
    assert "different config than the run" in capsys.readouterr().err
    with pytest.raises(UsageError, match="unknown config"):
        load_config("arith-unknown")


@pytest.mark.parametrize("config", ["synthetic-tiny", "arith-deq-tiny"])
def test_two_cpu_processes_cooperate_under_accelerate_launch(tmp_path, config):
    """accelerate launch --multi_gpu --num_processes 2 on CPU: the two processes join (each takes half of every batch),
    and the first step's loss, averaged over them, is that of one process on the whole batch. (The GRU-DEQ has
    parameters without gradient: its initial guess is computed without them.)"""
    data = str(tmp_path / "data")
    args = ["--config", config, "--data-dir", data, "--no-progress", "epochs=1", "log_every=1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TQDM_DISABLE="1")
    env.pop("ACCELERATE_CONFIG_FILE", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
        "--main_process_port", port, "-m", "deq_toy.train", *args, "--output-dir", str(tmp_path / "two"),
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout and proc.stdout.count("final (step 4)") == 1
    assert train.main([*args, "--output-dir", str(tmp_path / "one")]) == 0
    first = [read_metrics(tmp_path / d / "metrics.jsonl")[0] for d in ("one", "two")]
    assert first[0]["loss"] == pytest.approx(first[1]["loss"], rel=1e-3)


def test_the_arithmetic_chance_level_is_the_majority_class_accuracy(tmp_path):
    from deq_toy.experiments.arithmetic import ArithmeticExperiment, classification_metrics

    experiment = ArithmeticExperiment(load_config("arith-fc-tiny"), tmp_path / "data")
    sign = 1.0 if float(experiment.train_y.mean()) >= 0.5 else -1.0
    acc = classification_metrics(torch.full_like(experiment.valid_y, sign), experiment.valid_y)["acc"]
    assert experiment.baseline() == f"acc {acc:.1f} % (majority class)"
    assert 50.0 <= acc < 100.0
