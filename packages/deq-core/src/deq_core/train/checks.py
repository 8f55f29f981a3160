"""Validation of a training config dataclass with messages that name the key and the valid values:
:func:`check_choice`, :func:`check_at_least`, :func:`check_fraction`, and :func:`in_section`, which names the config
section in front of the key (used by the config sections, :mod:`deq_core.train.sections` and
:mod:`deq_core.train.deq_config`, and by the task packages' own sections)."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["check_at_least", "check_choice", "check_fraction", "in_section"]


def check_choice(config: Any, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` holds one of the values of its ``Literal[...]`` annotation
    (a field annotated otherwise, e.g. a solver given as ``str``, is left to its own check)."""
    hints = typing.get_type_hints(type(config))
    for key in keys:
        if typing.get_origin(hints[key]) is not typing.Literal:
            continue
        choices = typing.get_args(hints[key])
        if getattr(config, key) not in choices:
            raise ValueError(f"{key} must be one of {list(choices)}, got {getattr(config, key)!r}.")


def check_at_least(config: Any, minimum: float, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` is a number (not a bool) >= ``minimum``."""
    for key in keys:
        value = getattr(config, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ValueError(f"{key} must be a number >= {minimum}, got {value!r}.")


def check_fraction(config: Any, *keys: str, closed: bool = True) -> None:
    """Raise ValueError unless each field in ``keys`` is in [0, 1] (``closed``) or [0, 1)."""
    for key in keys:
        value = getattr(config, key)
        if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):
            raise ValueError(f"{key} must be in [0, 1{']' if closed else ')'}, got {value}.")


@contextmanager
def in_section(name: str) -> Iterator[None]:
    """Checks of the config section ``name``: a ValueError raised inside comes back with the section's name before
    the key (``optim.lr must be > 0, ...``), so that a message names the setting as it is written on the command
    line."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{name}.{error}") from None
