"""The value checks both task configs share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def in_section(name: str) -> Iterator[None]:
    """Checks of the config section ``name``: a ValueError raised inside comes back with the section's name before
    the key (``data.n_train must be ...``), as deq-core's sections report theirs."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{name}.{error}") from None


def check_damping(damping: float) -> None:
    """Raise ValueError unless ``phantom_damping`` is in (0, 1] (the phantom gradient's step size)."""
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"phantom_damping must be in (0, 1], got {damping}")
