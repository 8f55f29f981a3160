"""Presets carry the papers' hyperparameters; overrides are checked; run-directory helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from deq_core.experiment import apply_overrides
from deq_vision.checkpoint import (
    TrainState,
    checkpoint_path,
    config_changes,
    latest_checkpoint,
    list_checkpoints,
    load_config,
    prune_checkpoints,
    resolve_checkpoint,
    save_config,
)
from deq_vision.configs import PRESETS, Config, get_config


def test_paper_presets() -> None:
    large, jr = get_config("cifar10-mdeq-large"), get_config("cifar10-mdeq-large-jr")
    assert large.model == jr.model == "mdeq_large_cifar10"
    assert (large.max_iter, large.backward_max_iter, large.jac_weight) == (18, 20, 0.0)
    assert (jr.max_iter, jr.backward_max_iter, jr.jac_weight, jr.jac_prob) == (8, 7, 0.4, 0.02)
    assert get_config("imagenet-mdeq-small-jr").max_iter == 14 and get_config("imagenet-mdeq-small").max_iter == 26
    assert {c.model for c in PRESETS.values()} >= {"resnet18", "resnet101", "mdeq_tiny_cifar10", "mdeq_large_imagenet"}


def test_overrides_are_type_checked() -> None:
    cfg = apply_overrides(get_config("tiny-mdeq"), ["steps=7", "jac_weight=0.5", "eval_tol=none"])
    assert (cfg.steps, cfg.jac_weight, cfg.eval_tol) == (7, 0.5, None)
    with pytest.raises(ValueError, match="unknown config key"):
        apply_overrides(cfg, ["stepz=3"])
    with pytest.raises(ValueError, match="jac_prob"):
        apply_overrides(cfg, ["jac_prob=2"])
    with pytest.raises(ValueError, match="unknown config"):
        get_config("nope")


def test_run_directory_helpers(tmp_path: Path) -> None:
    cfg = get_config("tiny-mdeq")
    save_config(cfg, tmp_path, "tiny-mdeq")
    name, loaded = load_config(tmp_path, Config)
    assert name == "tiny-mdeq" and loaded == cfg
    assert config_changes(cfg, apply_overrides(cfg, ["lr=1", "eval_every=9"]), {"eval_every"}) == {"lr": (0.003, 1.0)}
    for step in (5, 10, 20):
        checkpoint_path(tmp_path, step).mkdir(parents=True)
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 20)
    prune_checkpoints(tmp_path, 2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_0000010", "step_0000020"]
    assert resolve_checkpoint(tmp_path) == (tmp_path, checkpoint_path(tmp_path, 20))
    assert resolve_checkpoint(checkpoint_path(tmp_path, 10)) == (tmp_path, checkpoint_path(tmp_path, 10))
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        resolve_checkpoint(tmp_path / "elsewhere")
    state = TrainState()
    state.load_state_dict({"step": 3})
    assert state.state_dict() == {"step": 3}
