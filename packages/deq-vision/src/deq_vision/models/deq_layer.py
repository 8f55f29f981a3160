"""A registered DEQ's layer as plain settings: what ``timm.create_model(NAME, deq=dict(...))`` takes, what an export's
config.json holds under ``model_args`` and what a weights file's header carries (:mod:`~.weights_config`).

The settings are the fields of deq-core's ``DEQConfig`` that make the layer (:data:`LAYER_KEYS`, read from the
dataclass): solvers and their options, limits, tolerances, stop rules, backward mode, eval limits. The fields that
schedule training (:data:`SCHEDULE_KEYS`: the jittered limit, unrolled pretraining, Jacobian regularization) belong to
the run, not to the model. Settings read as data never import code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeAlias

import deq_core
from deq_core.train.deq_config import DEQConfig
from deq_core.train.trust import check_import_paths

__all__ = ["LAYER_KEYS", "SCHEDULE_KEYS", "LayerSpec", "deq_layer", "layer_from_settings", "layer_settings"]

# What a DEQ architecture's ``deq=`` takes: a layer, its settings as plain data, or None (the weights' or the
# architecture's default layer).
LayerSpec: TypeAlias = deq_core.DEQ | Mapping[str, Any] | None

# The DEQConfig fields the training skeleton reads each step (its schedules); a model's layer is every other field.
SCHEDULE_KEYS: frozenset[str] = frozenset(
    {"max_iter_jitter", "pretrain_steps", "pretrain_depth", "jac_weight", "jac_prob", "jac_growth", "jac_every",
     "jac_stop"}
)  # fmt: skip
LAYER_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(DEQConfig) if f.name not in SCHEDULE_KEYS)


def layer_settings(deq: DEQConfig) -> dict[str, Any]:
    """The layer of a config's ``deq`` section as JSON data: {key: value} for :data:`LAYER_KEYS`, tuples as lists."""
    return {key: list(v) if isinstance(v := getattr(deq, key), tuple) else v for key in LAYER_KEYS}


def layer_from_settings(settings: Mapping[str, Any]) -> deq_core.DEQ:
    """The :class:`deq_core.DEQ` layer of plain settings (:func:`layer_settings`; keys left out take ``DEQConfig``'s
    defaults, so the settings written by earlier versions, which lack the newer keys, still load).

    Raises:
        ValueError: an unknown key, a bad value, or a solver that is not one of deq-core's built-ins: settings read as
            data (a config.json) never import code, so a layer with a user's solver ("package.module:Class") is
            built by the user, ``deq=deq_core.DEQ(solver=...)``.
    """
    unknown = sorted(set(settings) - set(LAYER_KEYS))
    if unknown:
        raise ValueError(f"deq: unknown layer settings {unknown}; valid: {', '.join(LAYER_KEYS)}.")
    check_import_paths(DEQConfig, settings, (), "deq.", fix="build that layer and pass deq=deq_core.DEQ(solver=...)")
    values = {key: tuple(v) if isinstance(v, list) else v for key, v in settings.items()}
    return DEQConfig(**values).layer()


def deq_layer(deq: LayerSpec, default: deq_core.DEQ | None = None) -> deq_core.DEQ | None:
    """``deq`` as a layer: None gives ``default``, settings go through :func:`layer_from_settings`, a layer is
    returned as is (the model checks that it is a ``deq_core.DEQ``)."""
    if deq is None:
        return default
    if isinstance(deq, Mapping):
        return layer_from_settings(deq)
    return deq
