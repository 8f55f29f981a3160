"""Evaluate a checkpoint: ``python -m deq_vision.evaluate --checkpoint RUN_OR_CHECKPOINT_DIR [--max-steps N]``.

Reports top-1 / top-5 accuracy at the config's inference limits and, for MDEQs, the accuracy against a hard stop of
max_iter = 1..N calls of f (the JR paper's Table 3; its NFE k is our max_iter k + 1, see :func:`paper_nfe`): a
table on stdout and ``hard_stop.json`` / ``hard_stop.png`` in the run directory (or in ``--output-dir``, e.g. for a
run folder that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from deq_core.train.checkpoints import checkpoint_weights, load_weights, resolve_checkpoint
from deq_core.train.cli import (
    MAX_SWEEP_LIMIT,
    add_trust_option,
    check_count,
    leave_working_directory,
    set_threads,
    usage_error,
)
from deq_core.train.errors import UsageError
from deq_core.train.files import check_writable, write_json
from deq_core.train.plots import write_figure
from deq_core.train.run_config import load_config, replace_config

from .configs import Config
from .data import DatasetError, build_datasets
from .train import build_model, evaluate_loader, finish_eval


def paper_nfe(calls: float) -> float:
    """The JR paper's NFE of a solve that made ``calls`` calls of f: ``calls - 1``.

    The paper counts Broyden updates after evaluating z0 (its hard stop "NFE = k" makes k + 1 calls of f); deq_core's
    ``max_iter`` counts every call of f, the one at z0 included. So paper NFE k is our max_iter k + 1, and max_iter 1
    (which returns f(z0)) has no counterpart in the paper."""
    return calls - 1


def load_model(checkpoint: Path, trusted_modules: Collection[str] = ()) -> tuple[Config, nn.Module, Path]:
    """(config, model with the checkpoint's weights in eval mode, run directory) from a run or checkpoint folder;
    ``trusted_modules``: the modules whose solvers the saved config may name by import path (none else is imported).

    Raises:
        FileNotFoundError: not a run / checkpoint folder, or the checkpoint has no model.safetensors.
        CheckpointError: (a ValueError) weights that cannot be read, do not fit the model config.json describes, or
            hold NaN or inf.
        UntrustedImportError: (a ValueError) the config names a solver of a module not in ``trusted_modules``.
    """
    run_dir, folder = resolve_checkpoint(Path(checkpoint))
    _, cfg = load_config(run_dir, Config, trusted_modules)
    weights = checkpoint_weights(folder)
    model = build_model(cfg)
    load_weights(model, weights)
    return cfg, model.eval(), run_dir


def hard_stop_sweep(
    model: nn.Module, loader: DataLoader, max_steps: int, device: torch.device | None = None
) -> list[dict[str, Any]]:
    """Accuracy with the forward solve stopped at max_iter = k = 1..max_steps calls of f (the one at z0 included; or
    earlier at the tolerance). Rows: {"max_iter", "paper_nfe" (= k - 1, the JR paper's count of solver updates),
    "loss", "acc", "acc5", "nfe_forward" (mean calls of f per batch), "residual"}."""
    device = device or next(model.parameters()).device
    rows = []
    for k in range(1, max_steps + 1):
        row = {"max_iter": k, "paper_nfe": int(paper_nfe(k))}
        rows.append(row | finish_eval(evaluate_loader(model, loader, device, max_iter=k)))
    return rows


def plot_hard_stop(rows: list[dict[str, Any]], out_path: Path) -> Path:
    """Top-1 accuracy and residual against the solver's hard stop (a PNG written aside and renamed:
    :func:`~deq_core.train.files.write_file`)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    steps = [r["max_iter"] for r in rows]
    axes[0].plot(steps, [r["acc"] for r in rows], "o-")
    axes[0].set(xlabel="hard stop max_iter (calls of f; paper NFE = max_iter - 1)", ylabel="top-1 accuracy (%)")
    axes[1].plot(steps, [r["residual"] for r in rows], "o-")
    axes[1].set(xlabel="hard stop max_iter (calls of f)", ylabel="forward residual", yscale="log")
    fig.tight_layout()
    return write_figure(fig, out_path)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a DatasetError (also one raised while evaluating, e.g. an image that fails to decode) or an output
    that cannot be written returns 2."""
    try:
        return _evaluate(argv)
    except (DatasetError, UsageError) as err:
        return usage_error("python -m deq_vision.evaluate", err)


def _evaluate(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deq_vision.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("--data-dir", type=Path, default=None, help="as for training (not needed for digits)")
    parser.add_argument(
        "--max-steps", type=int, default=12,
        help="largest hard stop of the sweep, as max_iter (calls of f; the JR paper's NFE = max_iter - 1) (MDEQs)",
    )  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--limit", type=int, default=None, help="evaluate N images only (a class-balanced subset, the same each time)"
    )
    parser.add_argument("--no-sweep", action="store_true", help="only the accuracy at the config's limits")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    add_trust_option(parser)
    parser.add_argument(
        "--output-dir", type=Path, default=None, help="where hard_stop.json and .png go (default: the run folder)"
    )
    args = parser.parse_args(argv)
    leave_working_directory(args.trust_solver, args.checkpoint)
    check_count(args.max_steps, "--max-steps", maximum=MAX_SWEEP_LIMIT)
    check_count(args.batch_size, "--batch-size")
    set_threads(args.threads)
    try:
        cfg, model, run_dir = load_model(args.checkpoint, args.trust_solver)
        if args.limit is not None:
            cfg = replace_config(cfg, {"data.eval_limit": args.limit})
        _, eval_set = build_datasets(cfg, args.data_dir)
    except (FileNotFoundError, ValueError, DatasetError) as err:
        return usage_error(parser.prog, err)
    loader = DataLoader(eval_set, batch_size=args.batch_size)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    result = finish_eval(evaluate_loader(model, loader, device))
    print(f"eval ({len(eval_set)} images): " + ", ".join(f"{k} {v:.4g}" for k, v in result.items()))
    if args.no_sweep or not cfg.is_deq:
        return 0
    out = args.output_dir or run_dir
    check_writable(out)  # before the sweep, not after it
    rows = hard_stop_sweep(model, loader, args.max_steps, device)
    print(f"{'max_iter':>8} {'paper NFE':>9} {'acc':>7} {'acc5':>7} {'loss':>8} {'calls':>5} {'residual':>9}")
    for r in rows:
        print(
            f"{r['max_iter']:>8} {r['paper_nfe']:>9} {r['acc']:>7.2f} {r['acc5']:>7.2f} {r['loss']:>8.4f} "
            f"{r['nfe_forward']:>5.1f} {r['residual']:>9.3g}"
        )
    write_json(out / "hard_stop.json", {"full": result, "rows": rows})
    plot_hard_stop(rows, out / "hard_stop.png")
    print(f"wrote {out / 'hard_stop.json'} and {out / 'hard_stop.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
