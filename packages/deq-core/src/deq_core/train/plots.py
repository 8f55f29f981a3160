"""The training plot of a run (:func:`plot_training`), its solver panels (:func:`draw_solver_curves`: NFE and
residual) and how every figure is written (:func:`write_figure`), shared by the task packages.

Every figure of the packages is a ``matplotlib.figure.Figure`` built directly (matplotlib's object API): no pyplot
state and no ``matplotlib.use``, so a notebook or GUI session that trains or evaluates a model keeps its backend."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .files import write_file
from .metrics import read_metrics, select

__all__ = ["draw_solver_curves", "end_of_pretraining", "plot_training", "write_figure"]


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


def end_of_pretraining(records: Iterable[dict[str, Any]]) -> int | None:
    """The last logged step of the unrolled (pretraining) phase, when a solve phase follows it."""
    train = [r for r in records if r.get("split") == "train"]
    unrolled = [int(r["step"]) for r in train if r.get("mode") == "unrolled"]
    solved = [int(r["step"]) for r in train if r.get("mode") == "solve"]
    if unrolled and solved and max(unrolled) < max(solved):
        return max(unrolled)
    return None


def plot_training(metrics_path: str | Path, out_path: str | Path, metric: str) -> Path:
    """Write the training plot of a run from its metrics.jsonl: loss (log scale) and ``metric`` of every split over
    steps, forward / backward NFE and the forward residual (DEQs), with a dotted line at the end of pretraining.
    Returns ``out_path`` (a PNG, written aside and renamed: :func:`~deq_core.train.files.write_file`). Needs
    matplotlib."""
    from matplotlib.figure import Figure

    records = read_metrics(metrics_path)
    splits = sorted({str(r.get("split")) for r in records}, key=lambda s: (s != "train", s))
    fig = Figure(figsize=(16, 3.6))
    axes = fig.subplots(1, 4)
    for split in splits:
        for ax, key in ((axes[0], "loss"), (axes[1], metric)):
            steps, values = select(records, split, key)
            if steps:
                ax.plot(steps, values, "-" if split == "train" else "o-", label=split, markersize=3)
    axes[0].set(title="loss", xlabel="step", yscale="log")
    axes[1].set(title=metric, xlabel="step")
    draw_solver_curves(axes[2], axes[3], records)
    switch = end_of_pretraining(records)
    for ax in axes:
        if switch is not None:
            ax.axvline(switch, color="grey", linestyle=":", linewidth=1, label="end of unrolled pretraining")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return write_figure(fig, out_path)


def write_figure(fig: Any, out_path: str | Path, dpi: int = 110) -> Path:
    """Write the matplotlib figure ``fig`` to ``out_path`` as PNG at ``dpi`` (aside and renamed:
    :func:`~deq_core.train.files.write_file`), then close it if pyplot made it (pyplot keeps every figure it made
    until closed); returns ``out_path`` as a Path."""
    try:
        write_file(Path(out_path), lambda path: fig.savefig(path, dpi=dpi, format="png"))
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")  # not imported: the figure is not one of pyplot's
        if pyplot is not None:
            pyplot.close(fig)
    return Path(out_path)
