"""Named presets (frozen dataclasses) for both tasks, and ``key=value`` overrides.

``get_config(name)`` returns a preset; ``load_config(name, overrides)`` also applies overrides through
:func:`deq_core.train.overrides.apply_overrides`, turning its errors into :class:`~deq_core.train.errors.UsageError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from deq_core.train.errors import UsageError
from deq_core.train.overrides import apply_overrides

from .arithmetic import ARITHMETIC_PRESETS, ArithmeticConfig
from .synthetic import SYNTHETIC_PRESETS, SyntheticConfig

Config = SyntheticConfig | ArithmeticConfig

PRESETS: dict[str, Config] = {**SYNTHETIC_PRESETS, **ARITHMETIC_PRESETS}


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


def config_from_dict(values: dict[str, object]) -> Config:
    """Rebuild a config from :func:`dataclasses.asdict` output (e.g. stored in a checkpoint)."""
    task = values.get("task")
    cls = {"synthetic": SyntheticConfig, "arithmetic": ArithmeticConfig}.get(str(task))
    if cls is None:
        raise UsageError(f"stored config has unknown task {task!r}; expected 'synthetic' or 'arithmetic'.")
    fields = dict(values)
    for key, value in fields.items():
        if isinstance(value, list):
            fields[key] = tuple(value)
    return cls(**fields)  # type: ignore[arg-type]


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
