"""Damped fixed-point iteration: z <- (1 - damping) z + damping f(z)."""

from __future__ import annotations

import torch

from ._options import check_number
from ._run import SolveRun


def check_options(*, damping: float) -> None:
    """Raise TypeError / ValueError for option types / values :func:`fixed_point` cannot use."""
    if not 0.0 < check_number("fixed_point", "damping", damping) <= 1.0:
        raise ValueError(f"fixed_point: damping must be in (0, 1], got {damping}.")


def fixed_point(run: SolveRun, x0, *, damping: float = 1.0) -> None:
    """Iterate z_{k+1} = z_k + damping (f(z_k) - z_k).

    Args:
        damping: step size in (0, 1]; 1 is plain iteration, smaller values damp oscillations.
    """
    check_options(damping=damping)
    x, fx, gx = run.evaluate(x0)
    while not run.finished:
        if damping == 1.0:
            step = run.freeze(fx, x)  # fx may be referenced as the best f(z): not overwritten
        else:
            step = run.freeze(torch.add(x, gx, alpha=damping), x, owned=True)
        x, fx, gx = run.evaluate(step)
