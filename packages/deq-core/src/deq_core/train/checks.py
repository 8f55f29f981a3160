"""Validation of a training config dataclass with messages that name the key and the valid values:
:func:`check_choice`, :func:`check_at_least`, :func:`check_fraction`, and :func:`check_training` for the training
settings task configs share (optimizer steps, batch, periods, learning rate, mixed precision)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


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


# The training settings task configs share, by the check they need; fields a config lacks are skipped.
_AT_LEAST_ONE = ("steps", "batch_size", "grad_accum", "eval_every", "log_every", "keep_checkpoints")
_AT_LEAST_ZERO = ("weight_decay", "warmup_steps", "grad_clip", "save_every", "seed", "stop_after")


def check_training(config: Any) -> None:
    """Check the training settings task configs share, those ``config`` has: ``mixed_precision`` (a ``Literal``
    field), optimizer step counts, batch sizes and periods >= 1, schedules and sizes >= 0, learning rate > 0 and
    ``batch_size`` divisible by ``grad_accum``. (The DEQ settings are checked by their section,
    :class:`deq_core.train.deq_config.DEQConfig`.)

    Raises:
        ValueError: the first bad setting, with its key and the valid values.
    """
    has = {f.name for f in dataclasses.fields(config)}
    if "mixed_precision" in has:
        check_choice(config, "mixed_precision")
    check_at_least(config, 1, *(k for k in _AT_LEAST_ONE if k in has))
    check_at_least(config, 0, *(k for k in _AT_LEAST_ZERO if k in has))
    if "lr" in has and not (isinstance(config.lr, (int, float)) and config.lr > 0):
        raise ValueError(f"lr must be > 0, got {config.lr}.")
    if {"batch_size", "grad_accum"} <= has and config.batch_size % config.grad_accum:
        raise ValueError(f"batch_size ({config.batch_size}) must be divisible by grad_accum ({config.grad_accum}).")
