"""The training loop: CLI runs on tiny settings, resume after an interruption, evaluation, config errors."""

import json
from pathlib import Path

import pytest

from conftest import run_module
from deq_core.train.metrics import read_metrics
from deq_core.train.run_config import replace_config
from deq_lm.configs import get_config
from deq_lm.evaluate import main as evaluate_main
from deq_lm.train import main, train

DEQ_KEYS = {"step", "split", "loss", "acc", "nfe_forward", "nfe_backward", "residual", "lr", "tokens_per_s"}


def _train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"}


def test_cli_tiny_deq_run_writes_metrics_checkpoint_and_plot(tmp_path):
    out = tmp_path / "run"
    proc = run_module(
        "deq_lm.train", "--config", "tiny-deq-transformer", "--output-dir", str(out), "steps=8",
        "deq.pretrain_steps=2", "deq.jac_weight=0.5", "deq.jac_prob=0.5", "deq.max_iter_jitter=3", "grad_accum=2",
        "dropout=0.1", "eval_every=4",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final (step 8)" in proc.stdout and "NFE forward" in proc.stdout
    # The console's story: the switch from unrolled pretraining to solving, once; the chance level and the folder.
    assert proc.stdout.count("unrolled pretraining done") == 1 and "step 2: unrolled pretraining done" in proc.stdout
    (final,) = [line for line in proc.stdout.splitlines() if line.startswith("final (step 8)")]
    assert final.endswith(f"chance level: acc 0.125 (uniform guess among 8 symbols); outputs in {out}")
    records = read_metrics(out / "metrics.jsonl")
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == list(range(1, 9))
    assert DEQ_KEYS <= set(train_records[-1])
    assert [r["mode"] for r in train_records[:3]] == ["unrolled", "unrolled", "solve"]
    assert any("jacobian_loss" in r for r in train_records)
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [4, 8] and valid[-1]["loss"] < train_records[0]["loss"]
    assert [r["split"] for r in records].count("test") == 1
    assert (out / "training.png").stat().st_size > 1000
    assert json.loads((out / "config.json").read_text())["config"]["optim"]["grad_accum"] == 2
    assert len(list((out / "checkpoints").iterdir())) == 1

    proc = run_module("deq_lm.evaluate", "--checkpoint", str(out), "--max-iters", "1,4", "--tols", "1e-2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["max_iter"] for r in sweep] == [1, 4, 4]
    assert sweep[0]["nfe_forward"] == 1 and sweep[0]["residual"] > sweep[1]["residual"]
    assert (out / "sweep.png").is_file()


@pytest.mark.parametrize("config", ["tiny-lstm", "tiny-deq-trellisnet", "tiny-transformer-xl"])
def test_loop_lowers_the_loss_of_other_models(tmp_path, config):
    summary = train(replace_config(get_config(config), {"optim.steps": 10}), tmp_path / "r", name=config)
    losses = _train_losses(tmp_path / "r")
    assert losses[10] < 0.95 * losses[1]
    assert summary["test_loss"] < losses[1]


def test_resume_after_interruption_gives_the_same_losses(tmp_path):
    """Dropout, the Jacobian draws, the iteration jitter and the pretraining switch all depend on state that a
    checkpoint must restore (RNG, step)."""
    changes = {"steps": 8, "dropout": 0.2, "deq.jac_weight": 0.5, "deq.jac_prob": 0.5, "deq.max_iter_jitter": 3,
               "deq.pretrain_steps": 3, "eval_every": 2}  # fmt: skip
    cfg = replace_config(get_config("tiny-deq-transformer"), changes)
    full = train(cfg, tmp_path / "full", name="full")
    stopped = train(replace_config(cfg, {"run.stop_after": 5}), tmp_path / "cut", name="cut")
    assert stopped["step"] == 5
    assert max(_train_losses(tmp_path / "cut")) == 5
    assert (tmp_path / "cut" / "checkpoints" / "step_0000005" / "memory_rank0.pt").is_file()
    resumed = train(cfg, tmp_path / "cut", name="cut", resume=True)
    a, b = _train_losses(tmp_path / "full"), _train_losses(tmp_path / "cut")
    assert sorted(b) == list(range(1, 9))  # no step logged twice
    for step in range(6, 9):
        assert a[step] == pytest.approx(b[step], rel=1e-6, abs=0), step
    assert full["test_loss"] == pytest.approx(resumed["test_loss"], rel=1e-6)


def test_resume_refuses_a_different_model(tmp_path):
    cfg = replace_config(get_config("tiny-gru"), {"optim.steps": 2})
    train(cfg, tmp_path / "r")
    with pytest.raises(ValueError, match="model.d_model: 12 -> 16"):
        train(replace_config(cfg, {"model.d_model": 16}), tmp_path / "r", resume=True)


INT_MAX = "2**31 - 1 = 2147483647, got 1e+30"  # the largest integer setting, and how 1e30 is shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "nope"], "unknown config 'nope'; valid configs: copy-deq-transformer"),
        (["--config", "tiny-lstm", "colour=red"], "unknown config key 'colour'; sections: data, model, deq, optim, "),
        (["--config", "tiny-lstm", "lrr=0.1"], "unknown config key 'lrr' (did you mean optim.lr?)"),
        (["--config", "tiny-lstm", "model.colour=red"], "unknown config section 'model' key 'colour'; valid keys: "),
        (["--config", "tiny-lstm", "optim=3"], "'optim' is a config section: set one of its keys, optim.batch_size="),
        (["--config", "tiny-lstm", "steps=ten"], "'steps=ten': Value 'ten' of type 'str' could not be"),
        (["--config", "tiny-lstm", "mem_len=-1"], "model.mem_len must be a number >= 0, got -1"),
        (["--config", "tiny-lstm", "data.T=0"], "data.T must be a number >= 1, got 0"),
        (["--config", "tiny-lstm", "min_lr_ratio=2"], "optim.min_lr_ratio must be in [0, 1], got 2.0"),
        (["--config", "tiny-lstm", "run.log_every=0"], "run.log_every must be a number >= 1, got 0"),
        (["--config", "tiny-lstm", "model=rnn"], "'model=rnn': Invalid value 'rnn', expected one of"),
        (["--config", "tiny-lstm", "deq.solver=newton"], "solver: unknown solver 'newton'; choose one of ['anderson'"),
        (["--config", "tiny-lstm", "batch_size=9", "grad_accum=2"], "optim.batch_size (9) must be divisible by"),
        (["--config", "tiny-lstm", "head=adaptive"], "data.task=copy_memory uses model.head=linear without model.tie"),
        (["--config", "tiny-lstm", "steps"], "not of the form key=value"),
        (["--config", "tiny-lstm", "model.d_model=1e30"], f"model.d_model must be an integer from 1 to {INT_MAX}"),
        (["--config", "tiny-lstm", "batch_size=1e30"], f"optim.batch_size must be an integer from 1 to {INT_MAX}"),
        (["--config", "tiny-lstm", "data.T=1e30"], f"data.T must be an integer from 1 to {INT_MAX}"),
        (["--config", "tiny-lstm", "dist_timeout=1e30"], "run.dist_timeout must be at most 604800 seconds (a week)"),
        (["--config", "tiny-lstm", "--threads", "100000"], "--threads must be a number of threads from 1 to "),
        (["--config", "tiny-lstm", "--threads", "-1"], "--threads must be a number of threads from 1 to "),
    ],
)
def test_config_errors_are_clear(tmp_path, capsys, args, message):
    code = main([*args, "--output-dir", str(tmp_path / "r")])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_cli_config_error_exits_2_with_the_message(tmp_path):
    proc = run_module("deq_lm.train", "--config", "tiny-lstm", "mem_len=-1", cwd=tmp_path)
    assert proc.returncode == 2 and "model.mem_len must be a number >= 0, got -1" in proc.stderr


def test_evaluate_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert evaluate_main(["--checkpoint", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_lm.evaluate: error: ") and "neither a run directory" in err, err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-iters", "0"), ("--max-iters", "-1"), ("--tols", "0"), ("--tols", "-1"), ("--tols", "nan"),
     ("--tols", "inf"), ("--max-iters", "100000000")],  # a limit that would not end
)  # fmt: skip
def test_evaluate_refuses_limits_and_tolerances_that_mean_nothing(tmp_path, capsys, option, value):
    out = tmp_path / "r"
    assert main(["--config", "tiny-deq-transformer", "--output-dir", str(out), "steps=1"]) == 0
    capsys.readouterr()
    assert evaluate_main(["--checkpoint", str(out), f"{option}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m deq_lm.evaluate: error: {option} takes comma-separated "), err
    assert err.count("\n") == 1 and f"got {value!r}" in err, err


def test_evaluate_with_no_tolerance_to_sweep_plots_the_limits_only(tmp_path, capsys):
    """--tols "" sweeps the inference limits only: the plot's tolerance panel is left empty (before: a matplotlib
    traceback, a log scale with no data)."""
    out = tmp_path / "r"
    assert main(["--config", "tiny-deq-transformer", "--output-dir", str(out), "steps=1"]) == 0
    assert evaluate_main(["--checkpoint", str(out), "--max-iters", "1,2", "--tols", ""]) == 0
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [row["max_iter"] for row in rows] == [1, 2] and (out / "sweep.png").is_file()


def test_a_run_that_diverges_stops_with_one_line(tmp_path, capsys):
    """optim.lr=1e30: the first step gives NaN, which the DEQ solve reports as a FloatingPointError."""
    out = tmp_path / "r"
    assert main(["--config", "tiny-deq-transformer", "--output-dir", str(out), "steps=2", "optim.lr=1e30"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m deq_lm.train: error: training diverged at step "), err
    assert err.count("\n") == 1 and "a lower optim.lr (it is 1e+30)" in err, err


def test_cli_resume_with_changed_settings_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["--config", "tiny-gru", "--output-dir", str(out), "steps=2"]) == 0
    code = main(["--config", "tiny-gru", "--output-dir", str(out), "steps=3", "--resume"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--resume with a different config than the run in" in err and "optim.steps: 2 -> 3" in err
    assert "another --output-dir" in err
