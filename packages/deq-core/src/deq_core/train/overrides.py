"""``key=value`` command-line overrides of a config dataclass (:func:`apply_overrides`), type-checked, with errors that
list the valid keys."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

C = TypeVar("C")


def _coerce(text: str, kind: Any, key: str) -> Any:
    """Parse ``text`` as the type ``kind`` of config field ``key``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if type(None) in options and text.lower() in ("none", "null"):
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(text, option, key)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError("; ".join(errors))
    if origin is typing.Literal:
        choices = typing.get_args(kind)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ValueError(f"{key} must be one of {list(choices)}, got {text!r}")
    if origin in (tuple, list):
        (item,) = typing.get_args(kind)[:1] or (str,)
        parts = [p for p in text.strip("()[]").split(",") if p.strip()]
        values = [_coerce(p.strip(), item, key) for p in parts]
        return tuple(values) if origin is tuple else values
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key} must be true or false, got {text!r}")
    if kind is int:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {text!r}") from None
        if not value.is_integer():
            raise ValueError(f"{key} must be an integer, got {text!r}")
        return int(value)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {text!r}") from None
    if kind is str:
        return text
    raise ValueError(f"{key} has type {kind} which cannot be set from the command line")


def apply_overrides(config: C, overrides: Sequence[str]) -> C:
    """Return a copy of the dataclass ``config`` with ``key=value`` overrides applied.

    Values are parsed by the field's annotated type (int, float, bool, str, Literal[...], Optional, tuple[...]).

    Raises:
        ValueError: malformed item, unknown key (the message lists the valid keys) or a value of the wrong type.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"apply_overrides needs a dataclass instance, got {type(config).__name__}.")
    hints = typing.get_type_hints(type(config))
    names = [f.name for f in dataclasses.fields(config)]
    changes: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value (e.g. lr=3e-4).")
        if key not in names:
            raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(names)}.")
        changes[key] = _coerce(text.strip(), hints[key], key)
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]
