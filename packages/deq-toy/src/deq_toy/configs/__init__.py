"""Named presets (frozen dataclasses) for both tasks, and ``key=value`` overrides.

``get_config(name)`` returns a preset; ``load_config(name, overrides)`` also applies overrides through
:func:`deq_core.train.overrides.apply_overrides`, turning its errors into :class:`~deq_core.train.errors.UsageError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from deq_core.train.deq_config import DEQConfig
from deq_core.train.errors import UsageError
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import config_from_dict as stored_config

from .arithmetic import ARITHMETIC_PRESETS, ArithmeticConfig
from .synthetic import SYNTHETIC_PRESETS, SyntheticConfig

Config = SyntheticConfig | ArithmeticConfig

PRESETS: dict[str, Config] = {**SYNTHETIC_PRESETS, **ARITHMETIC_PRESETS}
_DEQ_FIELDS = {f.name for f in dataclasses.fields(DEQConfig)}


def get_config(name: str) -> Config:
    """The preset called ``name``; raises UsageError listing the known names when there is none."""
    if name not in PRESETS:
        raise UsageError(f"unknown config {name!r}; known configs: {', '.join(sorted(PRESETS))}.")
    return PRESETS[name]


def load_config(name: str, overrides: Sequence[str] = ()) -> Config:
    """The preset ``name`` with ``key=value`` overrides applied (checked by type); errors are UsageError."""
    config = get_config(name)
    try:
        config = apply_overrides(config, list(overrides))
        config.check()
    except (TypeError, ValueError) as err:
        raise UsageError(f"bad override for config {name!r}: {err}") from None
    return config


# deq-toy < 0.5 stored its DEQ settings flat, under the report's names: name -> name in the deq section.
_OLD_NAMES = {
    "jacobian_weight": "jac_weight",
    "jacobian_probability": "jac_prob",
    "jacobian_samples": "jacobian_samples",
}
# deq-toy <= 0.5.0 named two training fields differently from deq-lm and deq-vision: old name -> name.
_OLD_TRAINING_NAMES = {"clip": "grad_clip", "checkpoint_every": "save_every"}


def config_from_dict(values: dict[str, object]) -> Config:
    """Rebuild a config from :func:`dataclasses.asdict` output (e.g. stored in a run's config.json), also in the flat
    layout of deq-toy < 0.5 (DEQ settings at the top level; ``anderson_m``, ``jacobian_weight``,
    ``jacobian_probability``, read into the ``deq`` section) and with the training names of deq-toy <= 0.5.0
    (``clip``, ``checkpoint_every``: now ``grad_clip``, ``save_every``)."""
    task = values.get("task")
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
    return stored_config(cls, fields)


__all__ = [
    "ARITHMETIC_PRESETS",
    "PRESETS",
    "SYNTHETIC_PRESETS",
    "ArithmeticConfig",
    "Config",
    "SyntheticConfig",
    "config_from_dict",
    "get_config",
    "load_config",
]
