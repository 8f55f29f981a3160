"""Training curves from metrics.jsonl: loss, forward/backward NFE and residual over steps (the DEQ paper's Figure 2,
left)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deq_core.train.metrics import read_metrics, select
from deq_core.train.plots import draw_solver_curves


def plot_training(metrics_path: Path, out_path: Path) -> Path:
    """Write a three-panel PNG (loss; NFE; residual, log scale) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for split, style in (("train", "-"), ("valid", "o-")):
        steps, values = select(records, split, "loss")
        if steps:
            axes[0].plot(steps, values, style, label=split, markersize=3)
    axes[0].set(title="loss (nats / position)", xlabel="step", yscale="log")
    draw_solver_curves(axes[1], axes[2], records)
    switch = _end_of_pretraining(records)
    for ax in axes:
        if switch is not None:
            ax.axvline(switch, color="grey", linestyle=":", linewidth=1, label="end of unrolled pretraining")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def _end_of_pretraining(records: list[dict[str, Any]]) -> int | None:
    """The last logged step of the unrolled (pretraining) phase, when a solve phase follows it."""
    unrolled = [r["step"] for r in records if r.get("split") == "train" and r.get("mode") == "unrolled"]
    solved = [r["step"] for r in records if r.get("split") == "train" and r.get("mode") == "solve"]
    if unrolled and solved and max(unrolled) < max(solved):
        return int(max(unrolled))
    return None
