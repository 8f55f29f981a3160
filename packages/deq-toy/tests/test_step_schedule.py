"""The DEQ step of deq-toy follows the skeleton's step schedule: unrolled pretraining really unrolls (no solver
call, NFE = the depth) and a jittered limit really limits the solve, through the training skeleton and through
``train_step``; the models' forwards take no per-step arguments (the Plan's one route is the layer)."""

import inspect
import json

import pytest

import deq_core
from deq_core.train.schedules import jittered_max_iter
from deq_toy.configs import load_config
from deq_toy.experiments import ArithmeticExperiment, Experiment, SyntheticExperiment
from deq_toy.loop import run_training
from deq_toy.models import GRUDEQ, FCClassifier, GRUClassifier, RepeatedGRU, ScalarDEQ

pytestmark = pytest.mark.filterwarnings("ignore:DEQ forward solve stopped unconverged")  # tol 1e-12 on purpose


def _train_records(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == "train"]


@pytest.fixture
def solves(monkeypatch):
    """The max_iter of every solve of a DEQ layer (calls of deq_core's solve from the layer)."""
    calls: list[int] = []
    real = deq_core.layer.solve

    def counted(*args, **kwargs):
        calls.append(kwargs["max_iter"])
        return real(*args, **kwargs)

    monkeypatch.setattr(deq_core.layer, "solve", counted)
    return calls


def _arithmetic(*overrides):
    """arith-deq-tiny on 64 rows (2 steps an epoch); its GRU-DEQ never reaches a relative residual of 1e-12 in float32,
    so every solve runs to the limit it is given."""
    return load_config("arith-deq-tiny", ["tol=1e-12", "n_train=64", "n_valid=16", *overrides])


def test_pretraining_unrolls_through_the_skeleton(tmp_path, capsys):
    config = _arithmetic("pretrain_steps=2", "pretrain_depth=3", "log_every=1", "eval_every=100")
    run_training(config, tmp_path / "run", tmp_path / "data", progress=False)
    records = _train_records(tmp_path / "run")
    assert [r["mode"] for r in records] == ["unrolled", "unrolled", "solve", "solve"]
    assert [r["nfe_forward"] for r in records[:2]] == [3, 3]  # f applied pretrain_depth times, no solve
    assert all("nfe_backward" not in r for r in records[:2])  # ordinary backprop: no adjoint solve
    assert [r["nfe_forward"] for r in records[2:]] == [15, 15] and all(r["nfe_backward"] > 0 for r in records[2:])
    out = capsys.readouterr().out
    assert "unrolled pretraining (depth 3) for 2 steps" in out and "step 2: unrolled pretraining done" in out


def test_pretraining_calls_no_solver_in_train_step(tmp_path, solves):
    experiment = ArithmeticExperiment(_arithmetic("pretrain_steps=1", "pretrain_depth=2"), tmp_path / "data")
    _, _, info = experiment.train_step(experiment.batch(0), 0)
    assert solves == [] and info.mode == "unrolled" and info.nfe == 2
    _, _, info = experiment.train_step(experiment.batch(1), 1)
    assert solves == [15] and info.mode == "solve" and info.nfe == 15


def test_jitter_changes_the_limit_of_every_step(tmp_path):
    config = _arithmetic("max_iter=10", "max_iter_jitter=6", "epochs=4", "log_every=1", "seed=5")
    run_training(config, tmp_path / "run", tmp_path / "data", progress=False)
    nfe = [r["nfe_forward"] for r in _train_records(tmp_path / "run")]
    drawn = [jittered_max_iter(10, 6, 5, step) for step in range(len(nfe))]
    assert nfe == drawn and len(set(nfe)) > 1, (nfe, drawn)


def test_jitter_and_the_jacobian_term_reach_the_1d_deq(solves):
    config = load_config("synthetic-tiny", ["max_iter=40", "max_iter_jitter=30", "jac_weight=1.0", "seed=3"])
    experiment = SyntheticExperiment(config)
    for step in range(6):
        loss, _, info = experiment.train_step(experiment.batch(step), step)
        assert info.jacobian_loss is not None and loss.requires_grad
    assert solves == [jittered_max_iter(40, 30, 3, step) for step in range(6)]


def test_no_model_or_task_forward_takes_per_step_arguments():
    """The stops of deq.max_iter end at the layer: no model's forward takes unroll / max_iter / jacobian_loss /
    control, and a task's forward takes no Jacobian flag."""
    per_step = {"unroll", "max_iter", "jacobian_loss", "jacobian", "control"}
    for cls in (ScalarDEQ, GRUDEQ, RepeatedGRU, FCClassifier, GRUClassifier):
        assert not per_step & set(inspect.signature(cls.forward).parameters), cls
    for cls in (Experiment, ArithmeticExperiment, SyntheticExperiment):
        assert list(inspect.signature(cls.forward).parameters) == ["self", "model", "batch"], cls
