"""deq-lm's committed run folders (packages/deq-lm/results): their configs, in every earlier layout (flat fields; flat
fields + nested ``deq``), load with every value in its section, and the claims runs are the runs ``python -m lab.lm``
would train."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deq_core.train.run_config import check_resume_config, flat_dict, load_config, resolve_key
from deq_lm.configs import Config
from deq_lm.train import RESUMABLE_CHANGES

RESULTS = Path(__file__).resolve().parents[1] / "packages" / "deq-lm" / "results"
COMMITTED = sorted(RESULTS.rglob("config.json"))


def _flat_saved(values: dict) -> dict[str, object]:
    """A saved config's settings by the name they were saved under (a nested section's keys dotted)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in flat_dict(values).items()}


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
