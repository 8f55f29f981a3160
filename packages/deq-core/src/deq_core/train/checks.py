"""Validation of a training config dataclass with messages that name the key and the valid values:
:func:`check_choice`, :func:`check_at_least`, :func:`check_fraction`, and :func:`check_deq_training` for the settings
every DEQ training config shares (solvers, limits, tolerances, solver options, pretraining, Jacobian schedule,
optimizer steps)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from .deq_settings import OPTION_FIELDS, parse_options


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


# The settings a DEQ training config shares, by the check they need; fields a config lacks are skipped.
_CHOICES = ("solver", "backward_solver", "stop_mode", "backward", "mixed_precision")


_AT_LEAST_ONE = ("max_iter", "backward_max_iter", "pretrain_depth", "steps", "batch_size", "grad_accum",
                 "eval_every", "log_every", "keep_checkpoints")  # fmt: skip


_AT_LEAST_ZERO = ("max_iter_jitter", "pretrain_steps", "jac_weight", "jac_growth", "jac_every", "jac_stop",
                  "weight_decay", "warmup_steps", "grad_clip", "save_every", "seed", "stop_after")  # fmt: skip


_POSITIVE = ("lr", "tol", "backward_tol")


_POSITIVE_OR_NONE = ("eval_tol",)


def check_deq_training(config: Any) -> None:
    """Check the settings DEQ training configs share, those ``config`` has: solver and mode names (``Literal``
    fields), iteration limits and optimizer step counts >= 1, schedules and sizes >= 0, ``jac_prob`` in [0, 1],
    learning rate and tolerances > 0 (``eval_tol`` and ``eval_max_iter`` may be None), ``max_iter_jitter`` <
    ``max_iter`` and ``batch_size`` divisible by ``grad_accum``.

    Raises:
        ValueError: the first bad setting, with its key and the valid values.
    """
    has = {f.name for f in dataclasses.fields(config)}
    check_choice(config, *(k for k in _CHOICES if k in has))
    check_at_least(config, 1, *(k for k in _AT_LEAST_ONE if k in has))
    check_at_least(config, 0, *(k for k in _AT_LEAST_ZERO if k in has))
    if "jac_prob" in has:
        check_fraction(config, "jac_prob")
    for key in (k for k in _POSITIVE + _POSITIVE_OR_NONE if k in has):
        value = getattr(config, key)
        if not (value is None and key in _POSITIVE_OR_NONE) and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{key} must be > 0{' or None' if key in _POSITIVE_OR_NONE else ''}, got {value}.")
    if "eval_max_iter" in has and config.eval_max_iter is not None and config.eval_max_iter < 1:
        raise ValueError(f"eval_max_iter must be >= 1 or None, got {config.eval_max_iter}.")
    if {"max_iter", "max_iter_jitter"} <= has and config.max_iter_jitter >= config.max_iter:
        raise ValueError(f"max_iter_jitter must be < max_iter ({config.max_iter}), got {config.max_iter_jitter}.")
    if {"batch_size", "grad_accum"} <= has and config.batch_size % config.grad_accum:
        raise ValueError(f"batch_size ({config.batch_size}) must be divisible by grad_accum ({config.grad_accum}).")
    for options_field, solver_field in OPTION_FIELDS:
        if solver_field in has:
            _check_solver(config, solver_field, options_field if options_field in has else None)


def _check_solver(config: Any, solver_field: str, options_field: str | None) -> None:
    """The solver named by ``solver_field`` (a built-in's shorthand or an import path) with the options of
    ``options_field`` (``key=value`` strings), checked by the solver itself; ValueError naming the field."""
    from .._solvers import resolve_solver

    try:
        resolve_solver(getattr(config, solver_field))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{solver_field}: {error}") from None
    if options_field is not None:
        options = parse_options(getattr(config, options_field), options_field)
        try:
            resolve_solver(getattr(config, solver_field), options)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{options_field}: {error}") from None
