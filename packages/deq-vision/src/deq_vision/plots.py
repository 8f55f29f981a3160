"""Training curves from metrics.jsonl: loss, accuracy, forward/backward NFE and residual over steps."""

from __future__ import annotations

from pathlib import Path

from deq_core.train.metrics import read_metrics, select
from deq_core.train.plots import draw_solver_curves


def plot_training(metrics_path: Path, out_path: Path) -> Path:
    """Write a four-panel PNG (loss; top-1 accuracy; NFE; residual, log scale) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for split, style in (("train", "-"), ("eval", "o-")):
        for ax, key in ((axes[0], "loss"), (axes[1], "acc")):
            steps, values = select(records, split, key)
            if steps:
                ax.plot(steps, values, style, label=split, markersize=3)
    axes[0].set(title="cross-entropy loss", xlabel="step", yscale="log")
    axes[1].set(title="top-1 accuracy (%)", xlabel="step")
    draw_solver_curves(axes[2], axes[3], records)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
