"""Named presets (frozen dataclasses of sections: ``data``, ``model``, ``deq``, ``optim``, ``run``) for both tasks,
and ``key=value`` overrides.

``get_config(name)`` returns a preset; ``load_config(name, overrides)`` also applies overrides through
:func:`deq_core.train.overrides.apply_overrides` (a setting's dotted name, ``optim.lr=1e-3``, or its short name when
one section only has it, ``lr=1e-3``), turning its errors into :class:`~deq_core.train.errors.UsageError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from deq_core.train import DEQConfig, UsageError, apply_overrides
from deq_core.train.run_config import config_from_dict as stored_config

from .arithmetic import (
    ARITHMETIC_PRESETS,
    ArithmeticConfig,
    ArithmeticDataConfig,
    ArithmeticModelConfig,
    ArithmeticOptimConfig,
)
from .sections import ToyOptimConfig, ToyRunConfig
from .synthetic import SYNTHETIC_PRESETS, SyntheticConfig, SyntheticDataConfig, SyntheticModelConfig, SyntheticRunConfig

Config = SyntheticConfig | ArithmeticConfig

PRESETS: dict[str, Config] = {**SYNTHETIC_PRESETS, **ARITHMETIC_PRESETS}
_DEQ_FIELDS = {f.name for f in dataclasses.fields(DEQConfig)}


def get_config(name: str) -> Config:
    """The preset called ``name``; raises UsageError listing the known names when there is none."""
    if name not in PRESETS:
        raise UsageError(f"unknown config {name!r}; known configs: {', '.join(sorted(PRESETS))}.")
    return PRESETS[name]


def load_config(name: str, overrides: Sequence[str] = ()) -> Config:
    """The preset ``name`` with ``key=value`` overrides applied (checked by type, then by each section); errors are
    UsageError."""
    config = get_config(name)
    try:
        return apply_overrides(config, list(overrides))
    except (TypeError, ValueError) as err:
        raise UsageError(f"bad override for config {name!r}: {err}") from None


# deq-toy < 0.5 stored its DEQ settings flat, under the report's names: name -> name in the deq section.
_OLD_NAMES = {
    "jacobian_weight": "jac_weight",
    "jacobian_probability": "jac_prob",
    "jacobian_samples": "jacobian_samples",
}
# deq-toy <= 0.5.0 named two training fields differently from deq-lm and deq-vision: old name -> name.
_OLD_TRAINING_NAMES = {"clip": "grad_clip", "checkpoint_every": "save_every"}


def config_from_dict(
    values: Mapping[str, Any], trusted_modules: Collection[str] = (), run_dir: str | Path | None = None
) -> Config:
    """Rebuild a config from :func:`dataclasses.asdict` output (e.g. stored in a run's config.json; ``data.task``
    picks the class). Earlier layouts are read too: deq-toy 0.5 (flat fields beside the ``deq`` section, ``model``
    the model's name: moved into their sections by :func:`deq_core.train.run_config.config_from_dict`), the training
    names of deq-toy <= 0.5.0 (``clip``, ``checkpoint_every``: now ``optim.grad_clip``, ``run.save_every``) and the
    flat layout of deq-toy < 0.5 (DEQ settings at the top level; ``anderson_m``, ``jacobian_weight``,
    ``jacobian_probability``, read into the ``deq`` section). ``values`` are data: a solver import path may name
    only a module of ``trusted_modules`` (nothing else is imported; :mod:`deq_core.train.trust`), the one installed
    in the environment, never a file of ``run_dir`` (the run folder ``values`` were read from).

    Raises:
        UsageError: an unknown task, or (UntrustedImportError) a solver of a module not in ``trusted_modules`` or
            found only in ``run_dir``.
    """
    data = values.get("data")
    task = data.get("task") if isinstance(data, Mapping) else values.get("task")
    cls = {"synthetic": SyntheticConfig, "arithmetic": ArithmeticConfig}.get(str(task))
    if cls is None:
        raise UsageError(f"stored config has unknown task {task!r}; expected 'synthetic' or 'arithmetic'.")
    fields = {_OLD_TRAINING_NAMES.get(k, k): v for k, v in values.items()}
    if "deq" not in fields:
        deq = {_OLD_NAMES[k]: fields.pop(k) for k in list(fields) if k in _OLD_NAMES}
        if "anderson_m" in fields:
            m = fields.pop("anderson_m")
            deq.update(solver_options=[f"m={m}"], backward_options=[f"m={m}"])
        fields["deq"] = {**deq, **{k: fields.pop(k) for k in list(fields) if k in _DEQ_FIELDS}}
    return stored_config(cls, fields, trusted_modules, run_dir=run_dir)


__all__ = [
    "ARITHMETIC_PRESETS",
    "PRESETS",
    "SYNTHETIC_PRESETS",
    "ArithmeticConfig",
    "ArithmeticDataConfig",
    "ArithmeticModelConfig",
    "ArithmeticOptimConfig",
    "Config",
    "SyntheticConfig",
    "SyntheticDataConfig",
    "SyntheticModelConfig",
    "SyntheticRunConfig",
    "ToyOptimConfig",
    "ToyRunConfig",
    "config_from_dict",
    "get_config",
    "load_config",
]
