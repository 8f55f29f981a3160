"""deq_core.experiment: the Jacobian and pretraining schedules, key=value overrides, the metrics log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import pytest
import torch

from deq_core.experiment import (
    JacobianSchedule,
    MetricsLog,
    PretrainSchedule,
    apply_overrides,
    read_metrics,
    select,
)


@dataclasses.dataclass(frozen=True)
class Config:
    lr: float = 1e-3
    steps: int = 10
    solver: Literal["anderson", "broyden"] = "anderson"
    sizes: tuple[int, ...] = (1, 2)
    name: str | None = None
    jitter: bool = False


def test_overrides_parse_each_type() -> None:
    cfg = apply_overrides(
        Config(), ["lr=3e-4", "steps=20", "solver=broyden", "sizes=4,5,6", "name=none", "jitter=true"]
    )
    assert cfg == Config(lr=3e-4, steps=20, solver="broyden", sizes=(4, 5, 6), name=None, jitter=True)
    assert apply_overrides(Config(), ["name=wt103", "steps=1e3"]) == Config(name="wt103", steps=1000)
    assert apply_overrides(Config(), []) == Config()


@pytest.mark.parametrize(
    "item, message",
    [
        ("foo=1", "unknown config key 'foo'; valid keys: lr, steps, solver, sizes, name, jitter"),
        ("steps=2.5", "steps must be an integer"),
        ("steps=ten", "steps must be an integer"),
        ("lr=fast", "lr must be a number"),
        ("solver=newton", "solver must be one of ['anderson', 'broyden']"),
        ("jitter=maybe", "jitter must be true or false"),
        ("lr", "not of the form key=value"),
    ],
)
def test_bad_overrides_say_what_is_wrong(item: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        apply_overrides(Config(), [item])
    assert message in str(err.value)


def test_jacobian_schedule_weight_grows_every_period() -> None:
    sched = JacobianSchedule(weight=2.0, growth=0.5, every=100)
    assert [sched.weight_at(s) for s in (0, 99, 100, 250)] == [2.0, 2.0, 2.5, 3.0]
    assert JacobianSchedule(weight=1.0).weight_at(10**6) == 1.0


def test_jacobian_schedule_probability_and_determinism() -> None:
    sched = JacobianSchedule(weight=1.0, probability=0.35, seed=3)
    draws = [sched.active(s) for s in range(4000)]
    assert abs(sum(draws) / len(draws) - 0.35) < 0.03
    assert draws == [JacobianSchedule(weight=1.0, probability=0.35, seed=3).active(s) for s in range(4000)]
    assert draws != [JacobianSchedule(weight=1.0, probability=0.35, seed=4).active(s) for s in range(4000)]
    assert not any(JacobianSchedule(weight=0.0, probability=1.0).active(s) for s in range(10))
    assert all(JacobianSchedule(weight=1.0, probability=1.0).active(s) for s in range(10))


@pytest.mark.parametrize("kwargs", [{"weight": -1.0}, {"probability": 1.5}, {"every": -1}, {"growth": -0.1}])
def test_jacobian_schedule_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        JacobianSchedule(**kwargs)


def test_pretrain_schedule() -> None:
    sched = PretrainSchedule(steps=3, depth=4)
    assert [sched.unroll_at(s) for s in range(5)] == [4, 4, 4, None, None]
    with pytest.raises(ValueError):
        PretrainSchedule(steps=1, depth=0)


def test_metrics_log_round_trip_and_truncate(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "run" / "metrics.jsonl")
    assert log.read() == []
    for step in range(5):
        log.write({"step": step, "split": "train", "loss": torch.tensor(1.0 / (step + 1)), "nfe": step})
    log.write({"step": 4, "split": "valid", "loss": float("nan")})
    records = log.read()
    assert len(records) == 6 and records[2]["loss"] == pytest.approx(1 / 3) and records[5]["loss"] == "nan"
    assert select(records, "train", "loss")[0] == [0, 1, 2, 3, 4]
    log.truncate_after(2)
    assert [r["step"] for r in log.read()] == [0, 1, 2]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"step": 0}) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_metrics(tmp_path / "bad.jsonl")
