"""``python -m deq_toy.reproduce synthetic|arithmetic --output-dir DIR [--data-dir DIR] [key=value ...]``

Trains every run of one table (skipping runs that already have results.json, resuming interrupted ones), then writes
DIR/table.md and the figures: synthetic -> figure5.png; arithmetic -> residual.png. ``key=value`` overrides apply to
every run (e.g. ``max_steps=800`` for a reduced budget).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deq_core.experiment import read_metrics

from .checkpoint import CHECKPOINT_NAME
from .configs import load_config
from .errors import UserError
from .evaluate import load_task
from .loop import run_training
from .plots import plot_figure5, plot_residuals

SYNTHETIC_RUNS = ("synthetic-gamma0", "synthetic-gamma2", "synthetic-gamma4")
ARITHMETIC_RUNS = ("arith-fc", "arith-gru", "arith-stacked-gru", "arith-repeated-gru", "arith-deq", "arith-deq-jac")
ARITHMETIC_LABELS = {
    "arith-fc": "FC",
    "arith-gru": "GRU",
    "arith-stacked-gru": "stacked GRU (3 layers)",
    "arith-repeated-gru": "repeated GRU (50x)",
    "arith-deq": "GRU-DEQ",
    "arith-deq-jac": "GRU-DEQ + Jacobian reg.",
}
# The student report's test accuracies (%): 4 operations, 4 operations biased, 2 operations (biased).
REPORT = {
    "arith-fc": ("64.58", "62.13", "-"),
    "arith-gru": ("80.73", "75.00", "96.0 (94.2)"),
    "arith-stacked-gru": ("85.0", "82.50", "-"),
    "arith-repeated-gru": ("87.41", "84.9", "-"),
    "arith-deq": ("87.62", "85.9", "96.3 (94.7)"),
    "arith-deq-jac": ("-", "-", "-"),
}


def ensure_run(name: str, overrides: Sequence[str], output_dir: Path, data_dir: Path, progress: bool) -> dict[str, Any]:
    """The results of run ``name``: read from OUTPUT/name/results.json, or trained (resumed) first."""
    run_dir = output_dir / name
    results_path = run_dir / "results.json"
    config = load_config(name, overrides)
    if results_path.exists():
        stored = json.loads((run_dir / "config.json").read_text())
        if stored != json.loads(json.dumps(dataclasses.asdict(config))):
            raise UserError(
                f"{run_dir} holds a finished run with another config; use the same overrides as that "
                "run, or another --output-dir."
            )
        return json.loads(results_path.read_text())
    resume = (run_dir / CHECKPOINT_NAME).exists()
    return run_training(config, run_dir, data_dir, resume=resume, progress=progress)


def synthetic(output_dir: Path, overrides: Sequence[str], progress: bool) -> str:
    """Train the three gammas; write table.md and figure5.png; return the table."""
    rows = []
    models = []
    for name in SYNTHETIC_RUNS:
        res = ensure_run(name, overrides, output_dir, output_dir, progress)
        rows.append(
            f"| {res['jacobian_weight']:g} | {res['mse']:.4f} | {res['nfe_fixed_point_mean']:.2f} | "
            f"{res['nfe_fixed_point_max']:.0f} | {res['nfe_broyden_mean']:.2f} | {res['dfdz_mean']:.3f} | "
            f"{res['dfdz_max']:.3f} |"
        )
        _, task = load_task(output_dir / name)
        models.append((f"gamma = {res['jacobian_weight']:g}", task.model))
    plot_figure5(models, output_dir / "figure5.png")
    header = (
        "| gamma | valid MSE | NFE fixed-point (mean) | NFE fixed-point (max) | NFE Broyden (mean) | "
        "mean abs(df/dz) at z* | max abs(df/dz) at z* |\n|---|---|---|---|---|---|---|"
    )
    return header + "\n" + "\n".join(rows) + "\n"


def _acc(res: dict[str, Any], key: str) -> str:
    return f"{res[key]['acc']:.2f}" if key in res else "n/a"


ARITHMETIC_HEADER = (
    "| model | test acc | precision | recall | biased test acc | two-op test acc | two-op biased acc | "
    "longer (41) acc | residual (test) | NFE (test) | report: test / biased / two-op (biased) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def arithmetic_row(name: str, res: dict[str, Any]) -> str:
    """One Markdown table row from a run's results.json (accuracy, precision, recall in %)."""
    test = res["test_four"]
    residual = f"{test['residual']:.3g}" if "residual" in test else "-"
    nfe = f"{test['nfe_forward']:.1f}" if "nfe_forward" in test else "-"
    return (
        f"| {ARITHMETIC_LABELS[name]} | {test['acc']:.2f} | {test['precision']:.2f} | {test['recall']:.2f} | "
        f"{_acc(res, 'test_four_biased')} | {_acc(res, 'test_two')} | {_acc(res, 'test_two_biased')} | "
        f"{_acc(res, 'test_longer')} | {residual} | {nfe} | {' / '.join(REPORT[name])} |"
    )


def arithmetic(output_dir: Path, data_dir: Path, overrides: Sequence[str], progress: bool) -> str:
    """Train the six models; write table.md and residual.png; return the table."""
    lines = [ARITHMETIC_HEADER]
    runs = {}
    for name in ARITHMETIC_RUNS:
        res = ensure_run(name, overrides, output_dir, data_dir, progress)
        lines.append(arithmetic_row(name, res))
        if name in ("arith-deq", "arith-deq-jac", "arith-repeated-gru"):
            runs[ARITHMETIC_LABELS[name]] = read_metrics(output_dir / name / "metrics.jsonl")
    plot_residuals(runs, output_dir / "residual.png")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deq_toy.reproduce", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=("synthetic", "arithmetic"))
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--data-dir", default=None, help="arithmetic data (default: OUTPUT_DIR/data)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every run")
    args = parser.parse_intermixed_args(argv)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        if args.table == "synthetic":
            table = synthetic(output_dir, args.overrides, not args.no_progress)
        else:
            data_dir = Path(args.data_dir) if args.data_dir else output_dir / "data"
            table = arithmetic(output_dir, data_dir, args.overrides, not args.no_progress)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    command = "python -m deq_toy.reproduce " + " ".join(argv if argv is not None else sys.argv[1:])
    (output_dir / "table.md").write_text(f"Command: `{command}`\n\n{table}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
