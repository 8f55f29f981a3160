"""``key=value`` command-line overrides of a config dataclass (:func:`apply_overrides`), parsed and type-checked by
OmegaConf's structured configs (dotted keys reach nested dataclasses), with errors that say which key and value are
wrong and list the valid keys."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .run_config import resolve_key

__all__ = ["apply_overrides"]

C = TypeVar("C")


def apply_overrides(config: C, overrides: Sequence[str]) -> C:
    """Return a copy of the dataclass ``config`` with ``key=value`` overrides applied (``key`` may be dotted,
    ``optim.lr=3e-4``, for a field of a nested dataclass; a key only one section has may omit the section, ``lr=3e-4``,
    and a section's name sets its ``name`` field, ``model=gru``: :func:`~deq_core.train.run_config.resolve_key`).

    Values are converted and checked by OmegaConf's typed nodes for the field's annotated type (int, float, bool,
    str, ``Literal[...]``, optional, tuple, nested dataclass); a sequence is given comma-separated, with or without
    brackets (``sizes=4,5,6``), ``none`` or ``null`` is None for an optional field, and an integer field accepts a
    float that is a whole number (``steps=1e4``). Values are not read as YAML: ``name=no`` is the string "no".

    Raises:
        ValueError: malformed item, unknown key (the message lists the valid keys) or a value of the wrong type.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"apply_overrides needs a dataclass instance, got {type(config).__name__}.")
    if not overrides:
        return config
    merged = OmegaConf.structured(config)
    _make_writable(merged)  # frozen dataclasses give read-only nodes; to_object builds frozen instances again
    for item in overrides:  # one at a time, so that an error names its item
        key, value = _parse(item, config)
        try:
            OmegaConf.update(merged, key, value, merge=False)
        except OmegaConfBaseException as err:
            raise ValueError(f"{item.strip()!r}: {_reason(err, value)}.") from None
    return typing.cast(C, OmegaConf.to_object(merged))


def _make_writable(node: DictConfig) -> None:
    """Clear the read-only flag of ``node`` and of every nested config node."""
    OmegaConf.set_readonly(node, False)
    for child in node.values():
        if isinstance(child, DictConfig):
            _make_writable(child)


def _reason(err: OmegaConfBaseException, value: object) -> str:
    """OmegaConf's message in one line (for a sequence: which elements it expected)."""
    reason = str(err).splitlines()[0]
    if isinstance(value, list) and "converted to " in reason:
        return f"an element of {value} could not be converted to " + reason.rpartition("converted to ")[2]
    return reason


def _parse(item: str, config: Any) -> tuple[str, str | list[str] | None]:
    """``key=value`` -> (key, value) with the key checked against the config's fields and the value as text for
    OmegaConf's typed nodes to convert and check (a list of texts for a sequence field, None for ``none`` / ``null``
    in an optional field). The text is never parsed as YAML, so ``mixed_precision=no`` stays the string "no"."""
    key, sep, text = item.partition("=")
    key, text = key.strip().replace("-", "_"), text.strip()
    if not sep or not key:
        raise ValueError(f"override {item!r} is not of the form key=value (e.g. lr=3e-4).")
    key = resolve_key(config, key, text)
    kind = _field_type(config, key)
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if type(None) in args and text.lower() in ("none", "null"):
            return key, None
        kind = next((a for a in args if a is not type(None)), kind)
    if typing.get_origin(kind) in (tuple, list):
        return key, [part.strip() for part in text.strip("()[]").split(",") if part.strip()]
    text = text.replace("${", "\\${")  # a literal "${", never an OmegaConf interpolation
    return key, _whole_number(text) if kind is int else text


def _field_type(config: Any, key: str) -> Any:
    """The annotated type of the (possibly dotted) field ``key`` of the dataclass ``config``."""
    node, kind = config, None
    for depth, name in enumerate(key.split(".")):
        names = [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []
        if name not in names:
            where = "config" if depth == 0 else f"config section {'.'.join(key.split('.')[:depth])!r}"
            raise ValueError(f"unknown {where} key {name!r}; valid keys: {', '.join(names)}.")
        kind = typing.get_type_hints(type(node))[name]
        node = getattr(node, name)
    return kind


def _whole_number(text: str) -> str:
    """``"1e4"`` -> ``"10000"``: a float that is a whole number, written as an integer; anything else unchanged (for
    OmegaConf to reject with its message)."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text
