"""Presets carry the papers' hyperparameters; overrides are checked; run-directory helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import check_resume_config, load_config, replace_config, save_config
from deq_vision.configs import PRESETS, Config, get_config
from deq_vision.train import RESUMABLE_CHANGES


def test_paper_presets() -> None:
    large, jr = get_config("cifar10-mdeq-large"), get_config("cifar10-mdeq-large-jr")
    assert large.model == jr.model == "mdeq_large_cifar10"
    assert (large.deq.max_iter, large.deq.backward_max_iter, large.deq.jac_weight) == (18, 20, 0.0)
    assert (jr.deq.max_iter, jr.deq.backward_max_iter, jr.deq.jac_weight, jr.deq.jac_prob) == (8, 7, 0.4, 0.02)
    assert (
        get_config("imagenet-mdeq-small-jr").deq.max_iter == 14 and get_config("imagenet-mdeq-small").deq.max_iter == 26
    )
    assert {c.model for c in PRESETS.values()} >= {"resnet18", "resnet101", "mdeq_tiny_cifar10", "mdeq_large_imagenet"}


def test_overrides_are_type_checked() -> None:
    cfg = apply_overrides(get_config("tiny-mdeq"), ["steps=7", "deq.jac_weight=0.5", "deq.eval_tol=none"])
    assert (cfg.steps, cfg.deq.jac_weight, cfg.deq.eval_tol) == (7, 0.5, None)
    with pytest.raises(ValueError, match="unknown config key"):
        apply_overrides(cfg, ["stepz=3"])
    with pytest.raises(ValueError, match="jac_prob"):
        apply_overrides(cfg, ["deq.jac_prob=2"])
    with pytest.raises(ValueError, match="unknown config"):
        get_config("nope")


def test_config_survives_the_run_directory(tmp_path: Path) -> None:
    """deq_core.train.run_config round-trips this package's Config; resuming refuses a change of what is computed
    only."""
    cfg = get_config("tiny-mdeq")
    save_config(cfg, tmp_path, "tiny-mdeq")
    assert load_config(tmp_path, Config) == ("tiny-mdeq", cfg)
    check_resume_config(tmp_path, apply_overrides(cfg, ["eval_every=9", "num_workers=2"]), RESUMABLE_CHANGES)
    with pytest.raises(ValueError, match=r"lr: 0.003 -> 1.0"):
        check_resume_config(tmp_path, apply_overrides(cfg, ["lr=1", "eval_every=9"]), RESUMABLE_CHANGES)


def test_solver_options_reach_the_mdeq_and_are_checked():

    import pytest

    from deq_core import Broyden
    from deq_core.train.overrides import apply_overrides
    from deq_vision.configs import get_config
    from deq_vision.train import build_model

    cfg = apply_overrides(get_config("tiny-mdeq"), ["deq.backward_options=memory=4", "deq.solver_options=memory=6"])
    deq = build_model(cfg).deq
    assert deq.backward.solver == Broyden(memory=4) and deq.solver == Broyden(memory=6)
    with pytest.raises(ValueError, match=r"solver_options: unknown option\(s\) \['m'\] for solver 'broyden'"):
        replace_config(cfg, {"deq.solver_options": ("m=3",)})
