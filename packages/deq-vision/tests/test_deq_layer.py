"""A DEQ layer as plain settings (deq_vision.models.deq_layer): what an export's config.json and a weights file's
header carry. The keys are DEQConfig's fields less the training schedule's; a config's layer comes back unchanged
from its settings written as JSON; settings written before the newer keys existed still load."""

from __future__ import annotations

import dataclasses
import json

import pytest

import deq_core
from deq_core.train.deq_config import DEQConfig
from deq_vision.models.deq_layer import LAYER_KEYS, SCHEDULE_KEYS, layer_from_settings, layer_settings

# A value other than the default for each field the training schedule reads.
SCHEDULE_CHANGES = dict(
    max_iter_jitter=2, pretrain_steps=5, pretrain_depth=3, jac_weight=0.5, jac_prob=0.5, jac_growth=0.1, jac_every=10,
    jac_stop=100,
)  # fmt: skip


def _layer(layer: deq_core.DEQ) -> tuple[object, ...]:
    """What a layer solves with: its repr (solvers, limits, stop rules, backward) and the settings it leaves out."""
    return (repr(layer), layer.check_every, layer.eval_max_iter, layer.eval_tol, layer.jacobian_samples,
            layer.on_nonfinite)  # fmt: skip


def test_every_field_is_a_layer_key_or_a_schedule_key() -> None:
    names = [f.name for f in dataclasses.fields(DEQConfig)]
    assert set(SCHEDULE_CHANGES) == SCHEDULE_KEYS and SCHEDULE_KEYS <= set(names)
    assert sorted([*LAYER_KEYS, *SCHEDULE_KEYS]) == sorted(names)


@pytest.mark.parametrize("key", sorted(SCHEDULE_CHANGES))
def test_a_schedule_key_does_not_change_the_layer(key: str) -> None:
    """Leaving the schedule out of the saved settings loses nothing of the model."""
    changed = DEQConfig(**{key: SCHEDULE_CHANGES[key]})
    assert _layer(changed.layer()) == _layer(DEQConfig().layer())


def test_a_configs_layer_comes_back_from_its_settings() -> None:
    cfg = DEQConfig(
        solver="broyden", solver_options=("memory=10",), max_iter=7, stop_over="batch", eval_max_iter=9,
        backward_solver="anderson", backward_max_iter=5, check_every=3, backward_check_every=2, jacobian_samples=2,
    )  # fmt: skip
    settings = json.loads(json.dumps(layer_settings(cfg)))
    assert list(settings) == list(LAYER_KEYS) and settings["solver_options"] == ["memory=10"]
    layer = layer_from_settings(settings)
    assert _layer(layer) == _layer(cfg.layer())
    assert (layer.check_every, layer.backward.check_every) == (3, 2)


def test_settings_without_the_newer_keys_load_with_the_defaults() -> None:
    """Settings written before check_every / backward_check_every were layer keys."""
    older = {k: v for k, v in layer_settings(DEQConfig(max_iter=7)).items() if not k.endswith("check_every")}
    assert _layer(layer_from_settings(older)) == _layer(DEQConfig(max_iter=7).layer())


def test_a_schedule_key_is_not_a_layer_setting() -> None:
    with pytest.raises(ValueError, match=r"deq: unknown layer settings \['pretrain_steps'\]; valid: solver, "):
        layer_from_settings({"max_iter": 3, "pretrain_steps": 5})
