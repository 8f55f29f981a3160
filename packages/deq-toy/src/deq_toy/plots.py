"""Figures (PNG, matplotlib's object API without pyplot state): the paper's Figure 5 for the 1D DEQ, training
curves, and the residual ||z - f(z)|| over training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from deq_core.train.metrics import select
from deq_core.train.plots import write_figure

from .models.scalar_deq import ScalarDEQ

SLICE_INPUTS = (-1.5, 0.0, 1.5)
SLICE_COLORS = ("tab:blue", "tab:orange", "tab:green")


def cobweb(model: ScalarDEQ, x: float, steps: int = 30, z0: float = 0.0) -> tuple[list[float], list[float]]:
    """Vertices of the cobweb path of plain iteration z <- f(z; x) from z0: (z, 0)->(z, f)->(f, f)->... coordinates."""
    xs, ys = [z0], [z0]
    z = torch.tensor([[z0]])
    xin = torch.tensor([[x]])
    with torch.no_grad():
        for _ in range(steps):
            fz = model.f(z, xin)
            xs += [float(z), float(fz)]
            ys += [float(fz), float(fz)]
            z = fz
            if not torch.isfinite(z).all() or abs(float(z)) > 1e3:
                break
    return xs, ys


def plot_figure5(
    models: Sequence[tuple[str, ScalarDEQ]],
    path: str | Path,
    z_range: tuple[float, float] = (-6, 8),
    x_range: tuple[float, float] = (-2.0, 2.0),
) -> Path:
    """One column per (label, model): top, the surface f(z; x) with the plane z_out = z and the equilibrium curve
    z*(x) (solved by Broyden); bottom, slices f(z; x) at x in SLICE_INPUTS with the cobweb of plain fixed-point
    iteration from z0 = 0. Returns the path of the PNG."""
    path = Path(path)
    n = len(models)
    fig = Figure(figsize=(4.2 * n, 7.5))
    zs = torch.linspace(*z_range, 36)
    xs = torch.linspace(*x_range, 24)
    grid_x, grid_z = torch.meshgrid(xs, zs, indexing="ij")
    for col, (label, model) in enumerate(models):
        with torch.no_grad():
            surface = model.f(grid_z.reshape(-1, 1), grid_x.reshape(-1, 1)).reshape(grid_x.shape)
            x_curve = torch.linspace(*x_range, 200).unsqueeze(1)
            z_curve, _ = model.eval()(x_curve)
            model.train()
        ax = fig.add_subplot(2, n, col + 1, projection="3d")
        ax.plot_surface(
            grid_x.numpy(), grid_z.numpy(), surface.clamp(*z_range).numpy(), cmap="viridis", alpha=0.75, linewidth=0
        )
        ax.plot_surface(grid_x.numpy(), grid_z.numpy(), grid_z.numpy(), color="grey", alpha=0.25, linewidth=0)
        ax.plot(
            x_curve.squeeze(1).numpy(),
            z_curve.squeeze(1).numpy(),
            z_curve.squeeze(1).numpy(),
            color="red",
            linewidth=2.5,
            label="z*(x)",
        )
        ax.set_xlabel("x")
        ax.set_ylabel("z")
        ax.set_zlabel("f(z; x)")
        ax.set_title(label)
        ax.legend(loc="upper left", fontsize=8)
        ax2 = fig.add_subplot(2, n, n + col + 1)
        ax2.plot(zs.numpy(), zs.numpy(), color="grey", linestyle="--", linewidth=1, label="z_out = z")
        for x_value, color in zip(SLICE_INPUTS, SLICE_COLORS):
            with torch.no_grad():
                fz = model.f(zs.unsqueeze(1), torch.full((len(zs), 1), x_value)).squeeze(1)
            ax2.plot(zs.numpy(), fz.numpy(), color=color, label=f"f(z; x={x_value:g})")
            cx, cy = cobweb(model, x_value)
            ax2.plot(cx, cy, color=color, linewidth=0.8, alpha=0.8)
        ax2.set_xlim(*z_range)
        ax2.set_ylim(*z_range)
        ax2.set_xlabel("z")
        ax2.set_ylabel("f(z; x)")
        ax2.set_title(f"{label}: slices and cobwebs from z0 = 0", fontsize=9)
        ax2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return write_figure(fig, path, dpi=80)


def plot_residuals(runs: dict[str, list[dict[str, Any]]], path: str | Path, tol: float | None = 1e-3) -> Path:
    """Per run, against the step: the mean relative residual ||f(z) - z|| / ||f(z)|| of the training batches (with the
    solver tolerance dashed), the forward NFE of the training batches, and the validation accuracy."""
    path = Path(path)
    fig = Figure(figsize=(13, 3.6))
    axes = [fig.add_subplot(1, 3, i + 1) for i in range(3)]
    panels = [
        ("train", "residual", "relative residual ||f(z) - z|| / ||f(z)|| (train)"),
        ("train", "nfe_forward", "forward NFE (train batches)"),
        ("valid", "acc", "validation accuracy (%)"),
    ]
    for ax, (split, key, title) in zip(axes, panels):
        for label, records in runs.items():
            steps, values = select(records, split, key)
            if steps:
                ax.plot(steps, values, label=label, marker="." if split == "valid" else None)
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=9)
    if tol is not None:
        axes[0].axhline(tol, color="black", linestyle="--", linewidth=1, label=f"tolerance {tol:g}")
    axes[0].set_yscale("log")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return write_figure(fig, path, dpi=80)
