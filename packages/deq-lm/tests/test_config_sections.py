"""The config's sections (data, model, deq, optim, run): every name in one section only, short names and dotted names
alike on the command line, and run folders of earlier layouts (flat fields; flat fields + nested ``deq`` as deq-lm
0.5.0 wrote them) loaded with every value in its section."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import check_resume_config, load_config, replace_config, resolve_key
from deq_core.train.trainer import run_steps
from deq_lm.configs import PRESETS, Config, get_config
from deq_lm.train import RESUMABLE_CHANGES, SequenceTask

OLD_LAYOUT = Path(__file__).resolve().parent / "data" / "config-0.5.0.json"  # written by deq-lm 0.5.0
# The run that wrote it: python -m deq_lm.train --config copy-deq-transformer-quick steps=60 eval_every=30
# pretrain_steps=30
OLD_LAYOUT_OVERRIDES = ["steps=60", "eval_every=30", "pretrain_steps=30"]


def _sections(cfg: Config) -> dict[str, set[str]]:
    return {f.name: {g.name for g in dataclasses.fields(getattr(cfg, f.name))} for f in dataclasses.fields(cfg)}


def test_the_config_is_sections_only_and_no_name_is_in_two():
    cfg = Config()
    sections = _sections(cfg)
    assert list(sections) == ["data", "model", "deq", "optim", "run"]
    names = [name for fields in sections.values() for name in fields]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for section, fields in sections.items():  # the short name of every setting resolves to its section
        for name in fields:
            assert resolve_key(cfg, name, 1) == f"{section}.{name}"
    assert resolve_key(cfg, "model", "gru") == "model.name"


def test_short_and_dotted_names_give_the_same_config():
    short = apply_overrides(get_config("tiny-lstm"), ["lr=3e-3", "T=9", "d_model=10", "seed=4", "model=gru"])
    dotted = ["optim.lr=3e-3", "data.T=9", "model.d_model=10", "run.seed=4", "model.name=gru"]
    assert short == apply_overrides(get_config("tiny-lstm"), dotted)
    assert (short.optim.lr, short.data.T, short.model.d_model, short.run.seed, short.model.name) == (
        3e-3, 9, 10, 4, "gru"
    )  # fmt: skip


def test_every_preset_trains_with_its_sections_settings():
    """The skeleton reads the config's run / optim / deq sections itself (steps: optim.steps); the task adds no step
    count or evaluation period of its own (run.eval_every 0: at the last step), only what may change on resume."""
    for name, cfg in PRESETS.items():
        task = SequenceTask(cfg)
        assert (task.steps, task.eval_period, task.resumable) == (0, 0, RESUMABLE_CHANGES), name
        assert run_steps(task, cfg) == cfg.optim.steps
    assert all(name.split(".")[0] in _sections(Config()) for name in RESUMABLE_CHANGES)


def test_a_run_folder_of_deq_lm_0_5_0_loads_and_resumes(tmp_path: Path):
    saved = json.loads(OLD_LAYOUT.read_text())["config"]
    assert "lr" in saved and isinstance(saved["deq"], dict) and saved["model"] == "deq_transformer"
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(OLD_LAYOUT, run / "config.json")
    name, cfg = load_config(run, Config)
    expected = apply_overrides(get_config(name), OLD_LAYOUT_OVERRIDES)
    # 0.5.0 wrote mixed_precision "no"; the preset leaves it unset now (the skeleton keeps the run's "no" on resume)
    assert cfg.run.mixed_precision == "no" and replace_config(cfg, {"run.mixed_precision": None}) == expected
    assert (cfg.data.T, cfg.data.n_valid, cfg.model.name, cfg.model.d_model, cfg.model.d_ff) == (
        100, 256, "deq_transformer", 32, 96
    )  # fmt: skip
    assert (cfg.optim.steps, cfg.optim.lr, cfg.optim.grad_clip, cfg.optim.warmup_steps) == (60, 5e-3, 1.0, 50)
    assert (cfg.run.eval_every, cfg.run.log_every, cfg.run.seed) == (30, 10, 0)
    assert (cfg.deq.max_iter, cfg.deq.pretrain_steps, cfg.deq.eval_max_iter) == (12, 30, 24)
    # resuming it with the same settings is allowed; a periodic setting may change, a model setting may not
    precision = {"run.mixed_precision": ("no", None)}  # allowed (RUN_RESUMABLE), recorded in 'resumed'
    assert check_resume_config(run, expected, RESUMABLE_CHANGES) == precision
    later = apply_overrides(expected, ["save_every=10"])
    assert check_resume_config(run, later, RESUMABLE_CHANGES) == {**precision, "run.save_every": (0, 10)}
    with pytest.raises(ValueError, match=r"model\.d_model: 32 -> 16"):
        check_resume_config(run, apply_overrides(expected, ["d_model=16"]), RESUMABLE_CHANGES)
