"""Evaluate a checkpoint: ``python -m deq_lm.evaluate --checkpoint RUN_OR_CHECKPOINT_DIR [--split test]``.

Reports the loss and the problem's metric, and for DEQ models sweeps the inference iteration limit and the tolerance
(the DEQ paper's Figure 3): a table on stdout, ``sweep.json`` and ``sweep.png`` in the checkpoint's run folder (or in
``--output-dir``, e.g. for a run folder that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import torch

from deq_core import Plan, use_plan
from deq_core.train.checkpoints import checkpoint_weights, load_weights, resolve_checkpoint
from deq_core.train.cli import add_trust_option, counts, leave_working_directory, tolerances, usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import check_writable, write_json
from deq_core.train.plots import write_figure
from deq_core.train.run_config import load_config, replace_config

from .configs import Config
from .models import SequenceModel, build_model
from .problems import Problem, build_problem
from .train import evaluate_split

SWEEP_FILE = "sweep.json"  # RUN_DIR/sweep.json: the rows of the last sweep (split, and per limit: loss, metric, NFE)


def load_model(
    checkpoint: Path, data_dir: Path | None = None, offline: bool = False, trusted_modules: Collection[str] = ()
) -> tuple[Config, Problem, SequenceModel, Path]:
    """(config, problem, model with the checkpoint's weights in eval mode, run directory) from a run or checkpoint
    folder; ``data_dir`` replaces the corpus folder (or ``data.dataset``) saved in the config (e.g. the corpus moved,
    in any form ``--data-dir`` of training takes); ``offline``: a
    Hugging Face corpus from the local cache only; ``trusted_modules``: the modules whose solvers the saved config
    may name by import path (none else is imported).

    Raises:
        FileNotFoundError: not a run / checkpoint folder.
        ValueError: a config or checkpoint that cannot be used, among them an UntrustedImportError and a
            CheckpointError (also weights that do not fit the model config.json describes, or that hold NaN).
    """
    run_dir, folder = resolve_checkpoint(Path(checkpoint))
    _, cfg = load_config(run_dir, Config, trusted_modules)
    if data_dir is not None:  # in place of the saved folder or Hugging Face dataset
        cfg = replace_config(cfg, {"data.data_dir": str(data_dir), "data.dataset": ""})
    weights = checkpoint_weights(folder)
    problem = build_problem(cfg, offline=offline)
    model = build_model(cfg, problem.vocab_size)
    load_weights(model, weights)  # restores tied weights, stored once
    return cfg, problem, model.eval(), run_dir


def sweep(
    cfg: Config, problem: Problem, model: SequenceModel, split: str, max_iters: Sequence[int], tols: Sequence[float]
) -> list[dict[str, Any]]:
    """Evaluate ``split`` at every inference limit (with tolerance ``cfg.deq.eval_tol or cfg.deq.tol``) and at every
    tolerance (with limit ``max(max_iters)``), each a :class:`deq_core.Plan` set on the model's DEQ layer (its own
    limits unchanged). Rows: {"max_iter", "tol", "loss", metric, "nfe_forward", "residual"}."""
    base_tol = cfg.deq.eval_tol or cfg.deq.tol
    settings = [(m, base_tol) for m in max_iters] + [(max(max_iters), t) for t in tols]
    rows = []
    for limit, tol in settings:
        with use_plan(model, Plan(max_iter=int(limit), tol=float(tol))):
            result = evaluate_split(model, problem, split, torch.device("cpu"))
        rows.append({"max_iter": int(limit), "tol": float(tol), **result})
    return rows


def plot_sweep(rows: list[dict[str, Any]], metric: str, n_limits: int, out_path: Path) -> Path:
    """Loss and metric against the inference limit, and against the tolerance (a PNG written aside and renamed:
    :func:`~deq_core.train.files.write_file`)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    by_limit, by_tol = rows[:n_limits], rows[n_limits:]
    axes[0].plot([r["max_iter"] for r in by_limit], [r["loss"] for r in by_limit], "o-", label="loss")
    axes[0].set(xlabel="inference iteration limit", ylabel="loss", yscale="log")
    ax2 = axes[0].twinx()
    ax2.plot([r["max_iter"] for r in by_limit], [r[metric] for r in by_limit], "s--", color="C1")
    ax2.set(ylabel=metric)
    if by_tol:  # none with --tols "": the panel stays empty (a log scale without data cannot be drawn)
        axes[1].plot([r["tol"] for r in by_tol], [r["loss"] for r in by_tol], "o-")
        axes[1].set(xlabel="tolerance", ylabel="loss", xscale="log", yscale="log")
    fig.tight_layout()
    return write_figure(fig, out_path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deq_lm.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("--split", default="test", choices=["valid", "test"])
    parser.add_argument("--max-iters", default="1,2,4,8,16,32", help="comma-separated inference limits to sweep")
    parser.add_argument("--tols", default="1e-1,1e-2,1e-3,1e-4", help="comma-separated tolerances to sweep")
    parser.add_argument("--no-sweep", action="store_true", help="only the metric at the config's eval limits")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="language modeling: the corpus folder, if moved (any form of train's "
                        "--data-dir)")  # fmt: skip
    parser.add_argument("--offline", action="store_true", help="language modeling: a Hugging Face corpus from the "
                        "local cache only, never downloaded (as HF_HUB_OFFLINE=1)")  # fmt: skip
    add_trust_option(parser)
    parser.add_argument(
        "--output-dir", type=Path, default=None, help="where sweep.json and sweep.png go (default: the run folder)"
    )
    args = parser.parse_args(argv)
    try:
        leave_working_directory(args.trust_solver, args.checkpoint)
        max_iters = counts(args.max_iters, "--max-iters") or [1]
        tols = tolerances(args.tols, "--tols")
        cfg, problem, model, run_dir = load_model(args.checkpoint, args.data_dir, args.offline, args.trust_solver)
    except (FileNotFoundError, ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    for warning in problem.data_warnings():
        print(f"WARNING: {warning}", file=sys.stderr)
    result = evaluate_split(model, problem, args.split, torch.device("cpu"))
    print(f"{args.split}: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items()))
    if args.no_sweep or not model.is_deq:
        return 0
    out = args.output_dir or run_dir
    try:
        check_writable(out)  # before the sweep, not after it
    except UsageError as err:
        return usage_error(parser.prog, err)
    rows = sweep(cfg, problem, model, args.split, max_iters, tols)
    print(f"{'max_iter':>8} {'tol':>8} {'loss':>10} {problem.metric:>8} {'nfe':>6} {'residual':>10}")
    for r in rows:
        line = f"{r['max_iter']:>8} {r['tol']:>8.0e} {r['loss']:>10.4g} {r[problem.metric]:>8.4f}"
        print(line + f" {r['nfe_forward']:>6.1f} {r['residual']:>10.3g}")
    try:
        write_json(out / SWEEP_FILE, {"split": args.split, "rows": rows})
        plot_sweep(rows, problem.metric, len(max_iters), out / "sweep.png")
    except UsageError as err:  # a folder that cannot be written, a full disk: one line
        return usage_error(parser.prog, err)
    print(f"wrote {out / SWEEP_FILE} and {out / 'sweep.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
