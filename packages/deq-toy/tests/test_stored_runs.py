"""Runs read back or resumed (``deq_toy.runs.ensure_run``, what the claims runs go through): an interrupted run is
resumed to the uninterrupted result, a finished one is read back, also from the config.json of earlier versions
(tests/data/configs_0_5_1.json: deq-toy 0.5.1's), whose configs read into the sections; the explicit reference."""

import json
from pathlib import Path

import pytest

from deq_core.train.errors import UsageError
from deq_toy.configs import load_config
from deq_toy.loop import run_training
from deq_toy.runs import ensure_run

TINY_SYNTHETIC = ["n_train=256", "n_valid=64", "epochs=2", "batch_size=64", "log_every=2", "eval_every=4"]
STORED_0_5_1 = json.loads((Path(__file__).parent / "data" / "configs_0_5_1.json").read_text())["runs"]


def test_interrupted_run_is_resumed_to_the_uninterrupted_result(tmp_path):
    config = load_config("synthetic-gamma2", TINY_SYNTHETIC)
    whole = run_training(config, tmp_path / "whole", progress=False)
    assert run_training(config, tmp_path / "cut", stop_after=3, progress=False) == {}
    resumed = ensure_run(tmp_path / "cut", "synthetic-gamma2", TINY_SYNTHETIC, tmp_path, progress=False)
    assert resumed == whole
    assert ensure_run(tmp_path / "cut", "synthetic-gamma2", TINY_SYNTHETIC, tmp_path, progress=False) == whole


def test_finished_run_stored_before_new_config_fields_is_read_back(tmp_path):
    """A finished run's config.json without fields added since (e.g. ``backward``, ``phantom_steps``) matches the
    same preset and overrides: the missing fields take their defaults; so does the config.json deq-toy 0.5.1 wrote for
    them (flat fields beside the ``deq`` section) and that of deq-toy < 0.5. A changed field is still refused."""
    config = load_config("synthetic-gamma2", TINY_SYNTHETIC)
    whole = run_training(config, tmp_path / "run", progress=False)
    path = tmp_path / "run" / "config.json"
    stored = json.loads(path.read_text())
    for field in ("backward", "phantom_steps", "phantom_damping", "backward_stop_mode"):
        del stored["config"]["deq"][field]
    path.write_text(json.dumps(stored))
    assert ensure_run(tmp_path / "run", "synthetic-gamma2", TINY_SYNTHETIC, tmp_path, progress=False) == whole
    # deq-toy 0.5.1's config.json of the same preset and overrides (tests/data/configs_0_5_1.json)
    old = next(r for r in STORED_0_5_1 if r["preset"] == "synthetic-gamma2" and r["overrides"] == TINY_SYNTHETIC)
    path.write_text(json.dumps({**stored, "config": old["config"]}))
    assert ensure_run(tmp_path / "run", "synthetic-gamma2", TINY_SYNTHETIC, tmp_path, progress=False) == whole
    # the flat layout of deq-toy < 0.5: DEQ settings at the top level, the Jacobian weight as jacobian_weight
    flat = {k: v for k, v in old["config"].items() if k != "deq"}
    deq = old["config"]["deq"]
    flat.update({k: v for k, v in deq.items() if k != "jac_weight"}, jacobian_weight=deq["jac_weight"])
    path.write_text(json.dumps({**stored, "config": flat}))
    assert ensure_run(tmp_path / "run", "synthetic-gamma2", TINY_SYNTHETIC, tmp_path, progress=False) == whole
    with pytest.raises(UsageError, match="another config"):
        ensure_run(
            tmp_path / "run", "synthetic-gamma2", [*TINY_SYNTHETIC, "deq.backward=jfb"], tmp_path, progress=False
        )


def test_explicit_reference_ignores_z(tmp_path):
    config = load_config("synthetic-gamma0", [*TINY_SYNTHETIC, "feedback=false"])
    results = run_training(config, tmp_path / "run", progress=False)
    assert results["dfdz_max"] == 0.0 and results["nfe_fixed_point_max"] <= 2
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["model"]["feedback"] is False


@pytest.mark.parametrize("stored", STORED_0_5_1, ids=lambda r: r["preset"])
def test_configs_of_0_5_read_into_the_sections(stored):
    """A config stored by deq-toy 0.5.1 (flat fields beside the ``deq`` section, ``model`` the model's name) reads
    back as its preset with the same overrides; so does 0.5.0's, with ``clip`` and ``checkpoint_every`` for deq-lm's
    and deq-vision's ``grad_clip`` and ``save_every``. The sections' layout round-trips."""
    import dataclasses

    from deq_toy.configs import config_from_dict

    config = load_config(stored["preset"], stored["overrides"])
    values = stored["config"]
    assert "optim" not in values and config_from_dict(values) == config
    renamed = {"grad_clip": "clip", "save_every": "checkpoint_every"}
    old = {renamed.get(k, k): v for k, v in values.items()}
    assert "save_every" not in old and config_from_dict(old) == config
    assert config_from_dict(dataclasses.asdict(config)) == config
