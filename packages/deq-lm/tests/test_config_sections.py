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
from deq_core.train.run_config import check_resume_config, flat_dict, load_config, replace_config, resolve_key
from deq_core.train.trainer import run_steps
from deq_lm.configs import PRESETS, Config, get_config
from deq_lm.train import RESUMABLE_CHANGES, SequenceTask

RESULTS = Path(__file__).resolve().parents[1] / "results"
COMMITTED = sorted(RESULTS.rglob("config.json"))
OLD_LAYOUT = Path(__file__).resolve().parent / "data" / "config-0.5.0.json"  # written by deq-lm 0.5.0
# The run that wrote it: python -m deq_lm.train --config copy-deq-transformer-quick steps=60 eval_every=30
# pretrain_steps=30
OLD_LAYOUT_OVERRIDES = ["steps=60", "eval_every=30", "pretrain_steps=30"]


def _sections(cfg: Config) -> dict[str, set[str]]:
    return {f.name: {g.name for g in dataclasses.fields(getattr(cfg, f.name))} for f in dataclasses.fields(cfg)}


def _flat_saved(values: dict) -> dict[str, object]:
    """A saved config's settings by the name they were saved under (a nested section's keys dotted)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in flat_dict(values).items()}


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


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(RESULTS)) for p in COMMITTED])
def test_committed_run_folders_load_into_sections(path: Path):
    saved = json.loads(path.read_text())["config"]
    _, cfg = load_config(path.parent, Config)
    loaded = _flat_saved(dataclasses.asdict(cfg))
    flat = _flat_saved(saved)
    assert len(flat) > 40
    for key, value in flat.items():  # every saved value (flat or under deq.) is in its section now
        dotted = resolve_key(cfg, key, value)
        assert dotted in loaded and loaded[dotted] == value, (key, dotted, value, loaded.get(dotted))
    name, steps, seed = (flat.get(dotted, flat.get(short)) for dotted, short in
                         (("model.name", "model"), ("optim.steps", "steps"), ("run.seed", "seed")))  # fmt: skip
    assert (cfg.model.name, cfg.optim.steps, cfg.run.seed) == (name, steps, seed)  # sections' layout or flat


def test_committed_run_folders_span_the_old_layouts():
    layouts = {"deq" in json.loads(p.read_text())["config"] for p in COMMITTED}
    assert len(COMMITTED) >= 10 and layouts == {False, True}  # flat, and flat + nested deq


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


def test_committed_claims_runs_are_the_runs_reproduce_would_train(tmp_path: Path):
    """``python -m lab.lm restore`` + ``claims`` read the committed run logs as finished runs of today's presets: their
    configs (flat layouts; the sections' layout for the Transformer-XL's seed-spread runs) differ from ``run_config``
    of their preset and seed (the folder's name) only in the corpus folder, a setting a resume may change."""
    from lab.lm import copy400, reproduce

    folders = sorted((RESULTS / "claims" / "run_logs").iterdir())
    assert folders  # the runs of today's presets committed so far (the earlier models' runs: claims/before/)
    for folder in folders:
        name, _ = load_config(folder, Config)
        seed = int(folder.name.rsplit("-seed", 1)[1])
        if name.startswith(f"{copy400.PREFIX}-"):  # copy memory at T = 400: no corpus, nothing may differ
            current = copy400.run_config(name.removeprefix(f"{copy400.PREFIX}-"), seed, quick=False)
            assert check_resume_config(folder, current, RESUMABLE_CHANGES) == {}, folder.name
            continue
        current = reproduce.run_config(name, seed, tmp_path / "corpus", quick=False)
        changes = check_resume_config(folder, current, RESUMABLE_CHANGES)
        # the corpus moved; runs before 0.7 stored mixed_precision "no", the presets leave it unset (RUN_RESUMABLE)
        assert set(changes) - {"run.mixed_precision"} == {"data.data_dir"}, (folder.name, changes)
        assert changes.get("run.mixed_precision", ("no", None)) == ("no", None), (folder.name, changes)
