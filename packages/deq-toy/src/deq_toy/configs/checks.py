"""The value checks both task configs share."""

from __future__ import annotations

from collections.abc import Iterable


def check_at_least_one(config: object, names: Iterable[str]) -> None:
    """Raise ValueError naming the first field in ``names`` whose value is below 1 (counts, sizes, intervals)."""
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")


def check_damping(damping: float) -> None:
    """Raise ValueError unless ``phantom_damping`` is in (0, 1] (the phantom gradient's step size)."""
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"phantom_damping must be in (0, 1], got {damping}")
