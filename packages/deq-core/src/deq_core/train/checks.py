"""Validation of a training config dataclass with messages that name the key and the valid values:
:func:`check_finite` (every float setting a finite number, the first check of every section), :func:`check_choice`,
:func:`check_at_least` (an integer also below :data:`INT_LIMIT`), :func:`check_fraction`, :func:`check_seed`, and
:func:`in_section`, which names the config section in front of the key (used by the config sections,
:mod:`deq_core.train.sections` and :mod:`deq_core.train.deq_config`, and by the task packages' own sections)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "INT_LIMIT",
    "SEED_LIMIT",
    "check_at_least",
    "check_choice",
    "check_finite",
    "check_fraction",
    "check_seed",
    "in_section",
]

SEED_LIMIT = 2**32
"""Seeds are ints in [0, SEED_LIMIT): what every generator a run seeds accepts (NumPy's legacy ``np.random.seed``,
called by Accelerate's ``set_seed``, refuses 2**32 and above; torch accepts up to 2**64 - 1)."""


INT_LIMIT = 2**31
"""Integer settings (counts and sizes: steps, rows, widths, image sizes, iterations, threads) are below INT_LIMIT:
torch, PIL and the C libraries under them take many of them as C ints, which a larger value overflows (``1e30`` on
the command line is a whole number), and no count or size of a run comes near it. Seeds have their own limit."""


def _float_fields(config: Any) -> list[str]:
    """The fields of the dataclass instance ``config`` annotated ``float`` or an optional float (``float | None``)."""
    hints = typing.get_type_hints(type(config))
    names = []
    for field in dataclasses.fields(config):
        hint = hints[field.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = float if float in typing.get_args(hint) else None
        if hint is float:
            names.append(field.name)
    return names


def _not_finite(key: str, value: float, default: Any = dataclasses.MISSING) -> ValueError:
    """The error of a NaN or infinite ``value`` of the field ``key``, naming its default (None: "none")."""
    if default is None:
        return ValueError(f"{key} must be a finite number or none, got {value!r} (nan and inf are not allowed; the "
                          "default is none).")  # fmt: skip
    example = f"; the default is {default!r}" if isinstance(default, (int, float)) else ""
    return ValueError(f"{key} must be a finite number, got {value!r} (nan and inf are not allowed{example}).")


def check_finite(config: Any, *keys: str) -> None:
    """Raise ValueError for a float field of the dataclass instance ``config`` that holds NaN, inf or -inf: the fields
    ``keys``, or, when none are given, every field annotated ``float`` or ``float | None`` (so that a field added to
    a section later is covered too). The message names the field and its default.

    Each config section calls it first in its ``__post_init__``: range checks written as comparisons let NaN through
    (``nan < 0`` is False), and no setting of a training run means anything at NaN or infinity."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}  # MISSING: a default_factory field
    for key in keys or _float_fields(config):
        value = getattr(config, key)
        if isinstance(value, float) and not math.isfinite(value):
            raise _not_finite(key, value, defaults.get(key))


def check_choice(config: Any, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` holds one of the values of its ``Literal[...]`` annotation, or
    None when it is optional (``Literal[...] | None``); a field annotated otherwise, e.g. a solver given as ``str``,
    is left to its own check."""
    hints = typing.get_type_hints(type(config))
    for key in keys:
        hint, optional = hints[key], False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = typing.get_args(hint)
            optional = type(None) in args
            hint = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
        if typing.get_origin(hint) is not typing.Literal:
            continue
        choices, value = typing.get_args(hint), getattr(config, key)
        if value is None and optional:
            continue
        if value not in choices:
            unset = " or none (unset)" if optional else ""
            raise ValueError(f"{key} must be one of {list(choices)}{unset}, got {value!r}.")


def check_at_least(config: Any, minimum: float, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` is a finite number (not a bool, NaN or inf) >= ``minimum``; an
    integer must also be below :data:`INT_LIMIT`."""
    for key in keys:
        value = getattr(config, key)
        if isinstance(value, float) and not math.isfinite(value):
            raise _not_finite(key, value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ValueError(f"{key} must be a number >= {minimum}, got {value!r}.")
        if isinstance(value, int) and value >= INT_LIMIT:
            shown = f"{value:.3g}" if value >= 10**12 else value  # 1e30 on the command line: 1e+30, not 31 digits
            raise ValueError(f"{key} must be an integer from {minimum} to 2**31 - 1 = {INT_LIMIT - 1}, got {shown}.")


def check_fraction(config: Any, *keys: str, closed: bool = True) -> None:
    """Raise ValueError unless each field in ``keys`` is in [0, 1] (``closed``) or [0, 1) (NaN is in neither)."""
    for key in keys:
        value = getattr(config, key)
        if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):
            raise ValueError(f"{key} must be in [0, 1{']' if closed else ')'}, got {value}.")


def check_seed(config: Any, *keys: str) -> None:
    """Raise ValueError unless each field in ``keys`` is an int (not a bool) in [0, :data:`SEED_LIMIT`), a seed
    every generator of a run accepts."""
    for key in keys:
        value = getattr(config, key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_LIMIT:
            raise ValueError(
                f"{key} must be an integer from 0 to 2**32 - 1 = {SEED_LIMIT - 1} (what NumPy's and torch's seeding "
                f"accept), got {value!r}."
            )


@contextmanager
def in_section(name: str) -> Iterator[None]:
    """Checks of the config section ``name``: a ValueError raised inside comes back with the section's name before
    the key (``optim.lr must be > 0, ...``), so that a message names the setting as it is written on the command
    line."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{name}.{error}") from None
