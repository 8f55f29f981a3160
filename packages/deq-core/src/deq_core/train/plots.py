"""Panels of a training plot shared by the task packages: :func:`draw_solver_curves` (NFE and residual)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .metrics import select


def draw_solver_curves(nfe_ax: Any, residual_ax: Any, records: Iterable[dict[str, Any]], split: str = "train") -> None:
    """Draw the DEQ panels of a training plot from metrics records: forward / backward NFE per step on ``nfe_ax`` and
    the mean forward residual (log scale) on ``residual_ax``. The axes are matplotlib ``Axes`` (this module does not
    import matplotlib: the caller creates the figure); records without DEQ statistics leave the panels empty."""
    records = list(records)
    for key, label in (("nfe_forward", "forward"), ("nfe_backward", "backward")):
        steps, values = select(records, split, key)
        if steps:
            nfe_ax.plot(steps, values, label=label)
    nfe_ax.set(title="NFE per step", xlabel="step")
    steps, values = select(records, split, "residual")
    if steps:
        residual_ax.plot(steps, values)
    residual_ax.set(title="forward residual (mean)", xlabel="step", yscale="log")
