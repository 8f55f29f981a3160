"""deq_core.Plan / deq_core.use_plan: the one route of a step's choices (unroll, limit, Jacobian term) to every DEQ
layer of a model, and the training skeleton that takes its settings from the config's sections only."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import deq_core
from deq_core import DEQ, Plan, use_plan
from deq_core.train import sections, task, trainer
from deq_core.train.deq_config import DEQConfig

sys.path.insert(0, str(Path(__file__).parent))


class TwoLayers(nn.Module):
    """Two DEQ layers, one nested in a submodule, on f(z) = W x - z: fixed-point iteration alternates between 0 and
    W x and never converges, so a solve always runs to its limit (its NFE is the limit it was given)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Linear(6, 6)
        self.first = DEQ(solver="fixed_point", max_iter=25, tol=1e-6, warn_unconverged="never")
        self.inner = nn.Sequential(nn.Identity())
        self.inner.add_module("second", DEQ(solver="fixed_point", max_iter=40, tol=1e-6, warn_unconverged="never"))

    def forward(self, x: torch.Tensor) -> tuple[deq_core.DEQInfo, deq_core.DEQInfo]:
        f = lambda z: self.w(x) - z  # noqa: E731
        _, a = self.first(f, torch.zeros_like(x))
        _, b = self.inner.second(f, torch.zeros_like(x))
        return a, b


def test_the_plan_reaches_every_layer_for_the_block_only():
    model, x = TwoLayers(), torch.randn(3, 6)
    own = [info.nfe for info in model(x)]
    assert own == [25, 40]  # each runs to its own limit
    with use_plan(model, Plan(max_iter=7)) as count:
        assert count == 2 and model.first.plan == model.inner.second.plan == Plan(max_iter=7)
        assert [info.nfe for info in model(x)] == [7, 7]
    assert model.first.plan is None and model.inner.second.plan is None
    assert [info.nfe for info in model(x)] == own


def test_an_unroll_plan_calls_no_solver(monkeypatch):
    model, x = TwoLayers(), torch.randn(3, 6, requires_grad=True)
    calls = []
    real = deq_core.layer.solve
    monkeypatch.setattr(deq_core.layer, "solve", lambda *a, **k: calls.append(k["max_iter"]) or real(*a, **k))
    with use_plan(model, Plan(unroll=3, jacobian_loss=True)):
        infos = model(x)
    assert calls == [] and all(i.mode == "unrolled" and i.nfe == 3 for i in infos)
    assert all(i.jacobian_loss is not None for i in infos)
    model(x)
    assert calls == [25, 40]  # without the plan: each layer's own solve


def test_arguments_of_the_call_win_over_the_plan():
    layer, x = DEQ(solver="fixed_point", max_iter=30, warn_unconverged="never"), torch.randn(2, 4)
    f = lambda z: x - z  # noqa: E731
    with use_plan(layer, Plan(unroll=2, max_iter=5, jacobian_loss=True)):
        _, planned = layer(f, torch.zeros_like(x))
        _, called = layer(f, torch.zeros_like(x), unroll=4, jacobian_loss=False)
        _, solved = layer(f, torch.zeros_like(x), max_iter=9, unroll=None)  # None: the plan's unroll still applies
    assert (planned.nfe, planned.mode, planned.jacobian_loss is not None) == (2, "unrolled", True)
    assert (called.nfe, called.jacobian_loss) == (4, None)
    assert solved.mode == "unrolled" and solved.nfe == 2


def test_an_evaluation_plan_sets_the_limits_and_leaves_the_layers_own():
    """An evaluation at other limits (a sweep) is a Plan too: it overrides eval_max_iter / eval_tol in eval mode (and
    the training limits in train mode) for the block, and the layer's own settings never change."""
    layer = DEQ(solver="fixed_point", max_iter=30, tol=1e-6, eval_max_iter=12, eval_tol=1e-3, warn_unconverged="never")
    w = torch.randn(5, 5, generator=torch.Generator().manual_seed(0)) * 0.2
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    f = lambda z: torch.tanh(z @ w + x)  # noqa: E731  (a contraction: converges)
    layer.eval()
    assert layer.limits() == (12, 1e-3)
    with torch.no_grad(), use_plan(layer, Plan(max_iter=4, tol=1e-9)):
        assert layer.limits() == (4, 1e-9)
        _, info = layer(f, torch.zeros_like(x))
        _, tol_only = layer(f, torch.zeros_like(x), max_iter=50)
    assert (info.forward.max_iter, info.forward.tol, info.nfe) == (4, 1e-9, 4)
    assert tol_only.forward.tol == 1e-9 and tol_only.nfe > 12  # 1e-9 needs more than the eval limit's 12 iterations
    assert (layer.max_iter, layer.tol, layer.eval_max_iter, layer.eval_tol, layer.limits()) == (30, 1e-6, 12, 1e-3,
                                                                                              (12, 1e-3))  # fmt: skip
    layer.train()
    with use_plan(layer, Plan(tol=1e-2)):
        assert layer.limits() == (30, 1e-2)
    assert layer.limits() == (30, 1e-6)


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "8"])
def test_an_iteration_limit_has_one_rule_wherever_it_is_given(value):
    """solve, the layer (training and eval limits), a Plan and the config's deq section refuse the same values."""
    for build in (lambda: deq_core.solve(torch.cos, torch.zeros(1, 2), max_iter=value), lambda: DEQ(max_iter=value),
                  lambda: DEQ(eval_max_iter=value), lambda: Plan(max_iter=value),
                  lambda: DEQConfig(max_iter=value), lambda: DEQConfig(eval_max_iter=value)):  # fmt: skip
        with pytest.raises(ValueError, match="max_iter must be"):
            build()


@pytest.mark.parametrize("value", [0.0, -1e-3, float("nan"), float("inf"), True, "1e-3"])
def test_a_tolerance_has_one_rule_wherever_it_is_given(value):
    for build in (lambda: deq_core.solve(torch.cos, torch.zeros(1, 2), tol=value), lambda: DEQ(tol=value),
                  lambda: DEQ(eval_tol=value), lambda: Plan(tol=value), lambda: DEQConfig(tol=value),
                  lambda: DEQConfig(eval_tol=value)):  # fmt: skip
        with pytest.raises(ValueError, match="tol must be"):
            build()


def test_the_plan_is_restored_when_the_block_raises():
    layer = DEQ(max_iter=5)
    outer = Plan(max_iter=3)
    with use_plan(layer, outer):
        with pytest.raises(RuntimeError, match="boom"):
            with use_plan(layer, Plan(unroll=1)):
                raise RuntimeError("boom")
        assert layer.plan is outer
    assert layer.plan is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"unroll": 0}, ValueError), ({"max_iter": 1.5}, ValueError), ({"unroll": True}, ValueError),
     ({"jacobian_loss": 1}, TypeError), ({"tol": 0.0}, ValueError), ({"tol": float("inf")}, ValueError),
     ({"tol": True}, ValueError)],
)  # fmt: skip
def test_a_bad_plan_is_refused(kwargs, error):
    with pytest.raises(error, match="Plan"):
        Plan(**kwargs)
    with pytest.raises(TypeError, match="deq_core.Plan"):
        with use_plan(nn.Linear(1, 1), {"unroll": 2}):  # type: ignore[arg-type]
            pass


def test_the_skeleton_holds_no_copy_of_a_section_setting():
    """Each setting of the run / optim / deq sections has one home: no TrainSettings, no per-package *_settings, and
    neither the step schedule nor the run nor the task base class repeats a section's field."""
    assert not hasattr(task, "TrainSettings") and not hasattr(sections, "train_settings")
    section_fields = {f.name for cls in (sections.RunConfig, sections.OptimConfig, DEQConfig) for f in
                      dataclasses.fields(cls)}  # fmt: skip
    for cls in (task.StepSchedule, trainer.Run):
        assert not section_fields & {f.name for f in dataclasses.fields(cls)}, cls
    task_attributes = {k for k in vars(task.Task) if not k.startswith("_")}
    assert not section_fields & task_attributes
    # the plan's own fields: what a layer takes per step, and the DEQ.forward keywords they stand for
    assert [f.name for f in dataclasses.fields(Plan)] == ["unroll", "max_iter", "jacobian_loss", "tol"]
    assert {"unroll", "max_iter", "jacobian_loss", "tol"} <= set(inspect.signature(DEQ.forward).parameters)
    assert list(inspect.signature(task.Task.forward).parameters) == ["self", "model", "batch", "schedule"]


def test_schedule_at_gives_no_limit_without_jitter_and_the_run_reads_the_sections(tmp_path):
    from skeleton_task import TinyConfig, TinyTask

    cfg = TinyConfig(max_iter=9, max_iter_jitter=0, pretrain_steps=1)
    assert trainer.schedule_at(cfg, 0).deq == Plan(unroll=2, jacobian_loss=trainer.schedule_at(cfg, 0).jacobian)
    assert trainer.schedule_at(cfg, 1).deq.max_iter is None  # the layers keep their own max_iter
    tiny = TinyTask(cfg)
    assert trainer.run_steps(tiny, cfg) == cfg.steps
    tiny.steps = 0
    with pytest.raises(ValueError, match="steps >= 1"):
        trainer.run_steps(tiny, cfg)
