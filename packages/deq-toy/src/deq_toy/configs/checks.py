"""The value check both task configs share."""

from __future__ import annotations

from collections.abc import Iterable


def check_at_least_one(config: object, names: Iterable[str]) -> None:
    """Raise ValueError naming the first field in ``names`` whose value is below 1 (counts, sizes, intervals)."""
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
