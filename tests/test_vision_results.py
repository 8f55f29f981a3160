"""deq-vision's committed run folders (packages/deq-vision/results): every config.json, in the flat layouts of
deq-vision < 0.4, loads into the config's sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deq_core.train.run_config import flat_dict, load_config, resolve_key
from deq_vision.configs import PRESETS, Config


def _located(cfg: Config, key: str) -> object:
    """The value of the setting a run folder of any layout saved as ``key`` (flat, ``deq.x``, or ``model``)."""
    section, _, name = resolve_key(cfg, key, "x").partition(".")
    return getattr(getattr(cfg, section), name)


def _saved_settings(saved: dict[str, object]) -> dict[str, object]:
    """A saved config's settings by the name it used (lists as tuples, the tuples of a loaded config)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in flat_dict(saved).items()}


RESULTS = Path(__file__).resolve().parents[1] / "packages" / "deq-vision" / "results"


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("config.json")), ids=lambda p: str(p.relative_to(RESULTS)))
def test_committed_run_folders_load_into_the_sections(path: Path) -> None:
    """Every committed config.json (flat layouts of deq-vision < 0.4) loads: each saved value lands in its section,
    nothing is dropped, and what it lacks takes the defaults (the values it ran with)."""
    saved = json.loads(path.read_text())
    name, cfg = load_config(path.parent, Config)
    assert name == saved["name"] and name in PRESETS
    for key, value in _saved_settings(saved["config"]).items():
        assert _located(cfg, key) == value, key
    assert cfg.model.name == saved["config"]["model"] and cfg.deq.max_iter == saved["config"]["max_iter"]
    assert cfg.run.save_grads_at == 0 and cfg.deq.backward == "implicit"  # not in these files: the defaults
