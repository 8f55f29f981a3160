"""Type checks of solver options, shared by the solvers' ``__post_init__``: the error names the solver, the option,
the type expected and the value given, in one line."""

from __future__ import annotations

import math


def check_int(method: str, name: str, value: object, minimum: int) -> None:
    """TypeError unless ``value`` is an int (not a bool); ValueError if it is below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{method}: {name} must be an int >= {minimum}, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{method}: {name} must be an int >= {minimum}, got {value!r}.")


def check_number(method: str, name: str, value: object) -> float:
    """TypeError unless ``value`` is a real number (int or float, not a bool or a string); ValueError if it is NaN or
    infinite. Returns it as a float, for the caller's range check."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{method}: {name} must be a number (float), got {value!r} ({type(value).__name__}).")
    if not math.isfinite(value):
        raise ValueError(f"{method}: {name} must be finite, got {value!r}.")
    return float(value)
