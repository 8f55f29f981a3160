"""Presets carry the papers' hyperparameters; the config's sections (data, model, deq, optim, run) check themselves
and keep every short name unambiguous; overrides are checked; run folders of every earlier layout load into the
sections; run-directory helpers."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest

from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import (
    check_resume_config,
    flat_dict,
    load_config,
    replace_config,
    resolve_key,
    save_config,
)
from deq_core.train.trainer import run_steps
from deq_vision.configs import PRESETS, Config, get_config
from deq_vision.train import RESUMABLE_CHANGES, VisionTask, main


def test_paper_presets() -> None:
    large, jr = get_config("cifar10-mdeq-large"), get_config("cifar10-mdeq-large-jr")
    assert large.model.name == jr.model.name == "mdeq_large_cifar10"
    # limits in calls of f: the files' Broyden thresholds F_THRES + 1 forward, B_THRES backward (every number against
    # its file: test_paper_presets.py)
    assert (large.deq.max_iter, large.deq.backward_max_iter, large.deq.jac_weight) == (19, 20, 0.0)
    assert (jr.deq.max_iter, jr.deq.backward_max_iter, jr.deq.jac_weight, jr.deq.jac_prob) == (9, 7, 0.4, 0.02)
    assert (
        get_config("imagenet-mdeq-small-jr").deq.max_iter == 15 and get_config("imagenet-mdeq-small").deq.max_iter == 27
    )
    names = {c.model.name for c in PRESETS.values()}
    assert names >= {"resnet18", "resnet101", "mdeq_tiny_cifar10", "mdeq_large_imagenet"}


def test_overrides_are_type_checked() -> None:
    cfg = apply_overrides(get_config("tiny-mdeq"), ["steps=7", "deq.jac_weight=0.5", "deq.eval_tol=none"])
    assert (cfg.optim.steps, cfg.deq.jac_weight, cfg.deq.eval_tol) == (7, 0.5, None)
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
    with pytest.raises(ValueError, match=r"optim\.lr: 0\.003 -> 1\.0"):
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


SECTIONS = ("data", "model", "deq", "optim", "run")


def test_config_is_sections_only_and_short_names_are_unambiguous() -> None:
    """No top-level setting besides the five sections, and no field name in two of them (so that ``lr=...`` always
    names ``optim.lr``)."""
    cfg = Config()
    assert tuple(f.name for f in dataclasses.fields(cfg)) == SECTIONS
    names = [f.name for s in SECTIONS for f in dataclasses.fields(getattr(cfg, s))]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert (cfg.optim.batch_size, cfg.optim.steps, cfg.run.log_every, cfg.run.eval_every) == (128, 1000, 50, 1000)
    assert cfg.model.name == "mdeq_tiny_cifar10" and cfg.is_deq and (cfg.head_classes, cfg.in_chans) == (10, 3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"data.image_size": 0}, "data.image_size must be a number >= 1, got 0"),
        ({"data.hflip": 1.5}, "data.hflip must be in [0, 1], got 1.5"),
        ({"data.dataset": "mnist"}, "data.dataset must be one of ['cifar10', 'imagenet', 'folder', 'digits', "),
        ({"data.dataset": "glyphs", "data.num_classes": 5}, "data.num_classes must be 0 or 10 (dataset=glyphs has 10"),
        ({"model.name": " "}, "model.name must be a timm model name"),
        ({"model.dropout": 1.0}, "model.dropout must be in [0, 1) or None, got 1.0"),
        ({"model.drop_rate": 1.0}, "model.drop_rate must be in [0, 1), got 1.0"),
        ({"optim.steps": 0}, "optim.steps must be a number >= 1, got 0"),
        ({"optim.lr": 0.0}, "optim.lr must be > 0, got 0.0"),
        ({"optim.ema_decay": 2.0}, "optim.ema_decay must be in [0, 1], got 2.0"),
        ({"optim.warmup_steps": -1}, "optim.warmup_steps must be a number >= 0, got -1"),
        ({"run.log_every": 0}, "run.log_every must be a number >= 1, got 0"),
        ({"run.mixed_precision": "fp8"}, "run.mixed_precision must be one of ['no', 'fp16', 'bf16']"),
        ({"deq.max_iter": 0}, "deq.max_iter must be a number >= 1, got 0"),
    ],
)
def test_each_section_checks_its_settings(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        replace_config(get_config("tiny-mdeq"), changes)
    assert message in str(info.value)


def test_short_names_reach_their_section() -> None:
    """A name one section has may omit it, and ``model=NAME`` sets ``model.name``: the same config as dotted names."""
    short = ["lr=1e-2", "model=resnet_mini", "image_size=8", "seed=3", "ema_decay=0.5", "max_iter=4", "eval_every=0"]
    cfg = apply_overrides(get_config("tiny-mdeq"), short)
    dotted = [f"{resolve_key(cfg, item.partition('=')[0], 'x')}={item.partition('=')[2]}" for item in short]
    assert dotted[:3] == ["optim.lr=1e-2", "model.name=resnet_mini", "data.image_size=8"]
    assert apply_overrides(get_config("tiny-mdeq"), dotted) == cfg
    assert (cfg.optim.lr, cfg.model.name, cfg.data.image_size, cfg.run.seed) == (1e-2, "resnet_mini", 8, 3)
    assert (cfg.optim.ema_decay, cfg.deq.max_iter, cfg.run.eval_every, cfg.is_deq) == (0.5, 4, 0, False)
    task = VisionTask(cfg, None, download=False)  # the skeleton reads run.eval_every itself: 0 means at the end
    assert (task.steps, task.eval_period, task.resumable) == (0, 0, RESUMABLE_CHANGES)
    assert run_steps(task, cfg) == cfg.optim.steps  # the skeleton's count: optim.steps


def _located(cfg: Config, key: str) -> object:
    """The value of the setting a run folder of any layout saved as ``key`` (flat, ``deq.x``, or ``model``)."""
    section, _, name = resolve_key(cfg, key, "x").partition(".")
    return getattr(getattr(cfg, section), name)


def _saved_settings(saved: dict[str, object]) -> dict[str, object]:
    """A saved config's settings by the name it used (lists as tuples, the tuples of a loaded config)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in flat_dict(saved).items()}


# config.json of a tiny-mdeq run written by deq-vision 0.4.0 (flat settings, the DEQ settings nested as "deq") with
# python -m deq_vision.train --config tiny-mdeq steps=6 eval_every=3 save_every=3 augment=true mixup=0.2 dropout=0.1
#     weight_decay=1e-4 warmup_steps=2 grad_clip=1.0 stop_after=3
CONFIG_040 = {
    "dataset": "cifar10", "num_classes": 0, "image_size": 16, "train_limit": 0, "eval_limit": 16, "num_workers": 0,
    "augment": True, "scale_min": 0.35, "hflip": 0.5, "color_jitter": 0.0, "auto_augment": None, "mixup": 0.2,
    "cutmix": 0.0, "label_smoothing": 0.0, "model": "mdeq_mini", "dropout": 0.1, "drop_rate": 0.0,
    "deq": {
        "solver": "broyden", "solver_options": [], "max_iter": 6, "tol": 0.001, "stop_mode": "rel",
        "eval_max_iter": None, "eval_tol": None, "backward": "implicit", "backward_solver": "broyden",
        "backward_options": [], "backward_max_iter": 6, "backward_tol": 0.001, "backward_stop_mode": "rel",
        "phantom_steps": 5, "phantom_damping": 0.5, "jacobian_samples": 1, "on_nonfinite": "raise",
        "max_iter_jitter": 0, "pretrain_steps": 1, "pretrain_depth": 2, "jac_weight": 0.0, "jac_prob": 1.0,
        "jac_growth": 0.0, "jac_every": 0, "jac_stop": 0,
    },
    "steps": 6, "batch_size": 8, "grad_accum": 1, "opt": "adam", "lr": 0.003, "weight_decay": 0.0001, "momentum": 0.9,
    "sched": "cosine", "warmup_steps": 2, "warmup_lr": 1e-05, "min_lr": 0.0, "grad_clip": 1.0, "mixed_precision": "no",
    "ema_decay": 0.0, "eval_every": 3, "log_every": 1, "save_every": 3, "keep_checkpoints": 2, "seed": 0,
    "stop_after": 3,
}  # fmt: skip


def test_a_run_folder_of_version_040_loads_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"name": "tiny-mdeq", "config": CONFIG_040, "data_dir": "d"}))
    _, cfg = load_config(tmp_path, Config)
    for key, value in _saved_settings(CONFIG_040).items():
        assert _located(cfg, key) == value, key
    assert (cfg.data.mixup, cfg.model.dropout, cfg.deq.pretrain_steps) == (0.2, 0.1, 1)
    assert (cfg.optim.warmup_steps, cfg.optim.grad_clip, cfg.run.stop_after) == (2, 1.0, 3)
    same = ["steps=6", "eval_every=3", "save_every=3", "augment=true", "mixup=0.2", "dropout=0.1", "weight_decay=1e-4",
            "warmup_steps=2", "grad_clip=1.0"]  # fmt: skip
    current = apply_overrides(get_config("tiny-mdeq"), same)
    # 0.4.0 wrote mixed_precision "no"; the preset leaves it unset now (the skeleton keeps the run's "no" on resume)
    assert replace_config(cfg, {"run.stop_after": 0, "run.mixed_precision": None}) == current
    allowed = check_resume_config(tmp_path, current, RESUMABLE_CHANGES, data_dir="d")  # and RUN_RESUMABLE
    assert allowed == {"run.stop_after": (3, 0), "run.mixed_precision": ("no", None)}  # resumes with the preset
    with pytest.raises(ValueError, match=r"--resume with a different config .*: optim\.lr: 0\.003 -> 0\.01"):
        check_resume_config(tmp_path, replace_config(current, {"lr": 0.01}), RESUMABLE_CHANGES)


def _float_keys(cfg: Config) -> list[str]:
    """Dotted names of the fields annotated float (or float | None) in every section of ``cfg``."""
    keys = []
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        hints = typing.get_type_hints(type(value))
        keys += [f"{section.name}.{f.name}" for f in dataclasses.fields(value)
                 if float in (hints[f.name], *typing.get_args(hints[f.name]))]  # fmt: skip
    return keys


FLOAT_KEYS = _float_keys(Config())


def test_the_float_settings_of_every_section_are_found() -> None:
    assert set(FLOAT_KEYS) == {
        "data.scale_min", "data.hflip", "data.color_jitter", "data.mixup", "data.cutmix", "data.label_smoothing",
        "model.dropout", "model.drop_rate", "deq.tol", "deq.eval_tol", "deq.backward_tol", "deq.phantom_damping",
        "deq.jac_weight", "deq.jac_prob", "deq.jac_growth", "optim.lr", "optim.weight_decay", "optim.grad_clip",
        "optim.momentum", "optim.warmup_lr", "optim.min_lr", "optim.ema_decay", "run.dist_timeout",
    }  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_every_float_setting_refuses_nan_and_inf_naming_it(key: str, value: str) -> None:
    with pytest.raises(ValueError) as info:
        apply_overrides(get_config("tiny-mdeq"), [f"{key}={value}"])
    assert f"{key} must be a finite number" in str(info.value) and f"got {value}" in str(info.value)


def test_color_jitter_is_checked_like_the_other_augmentation_strengths() -> None:
    with pytest.raises(ValueError, match=r"data\.color_jitter must be a number >= 0, got -0\.1"):
        apply_overrides(get_config("tiny-mdeq"), ["color_jitter=-0.1"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lr=nan", "optim.lr must be a finite number, got nan"),
        ("lr=inf", "optim.lr must be a finite number, got inf"),
        ("deq.tol=inf", "deq.tol must be a finite number, got inf"),
        ("weight_decay=nan", "optim.weight_decay must be a finite number, got nan"),
        ("grad_clip=nan", "optim.grad_clip must be a finite number, got nan"),
        ("mixup=nan", "data.mixup must be a finite number, got nan"),
        ("run.seed=4294967296", "run.seed must be an integer from 0 to 2**32 - 1 = 4294967295"),
        ("num_workers=100000", "data.num_workers must be at most 256, got 100000: each worker is a process"),
    ],
)
def test_bad_numbers_on_the_command_line_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    assert main(["--config", "tiny-mdeq", "--output-dir", str(tmp_path / "run"), override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m deq_vision.train: error: {message}"), err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()
