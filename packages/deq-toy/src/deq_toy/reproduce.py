"""``python -m deq_toy.reproduce synthetic|arithmetic --output-dir DIR [options] [key=value ...]``

The papers' tables: trains every run of one table (skipping runs that already have results.json, resuming
interrupted ones), then writes the table and the figures: synthetic -> DIR/table.md, DIR/figure5.png; arithmetic ->
DIR/NAME.md (``--name``, default ``table``) and DIR/NAME_residual.png (residual over training of the DEQs / repeated
GRU among the runs).
``key=value`` overrides apply to every run (e.g. ``optim.max_steps=400``, or ``max_steps=400``, for a reduced budget,
``model.readout=last`` for the length-independent readout).

Arithmetic options: ``--runs arith-gru,arith-deq`` selects presets (default: all six); ``--variants two,two_biased``
trains each run on each listed data variant, in DIR/VARIANT/PRESET (without it: DIR/PRESET, trained on the config's
``data.variant``, "four" unless overridden); ``--prepare-data`` only generates the data files of those runs and exits
(call it before starting runs in parallel on one data folder).

``--trust-solver MODULE`` (repeatable): the runs' saved config.json may name a solver of MODULE by import path
(``deq.solver=MODULE:Class`` among the overrides); a saved config imports no other module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from deq_core.train import UsageError
from deq_core.train.cli import add_trust_option, usage_error
from deq_core.train.files import check_writable, write_text
from deq_core.train.metrics import read_metrics

from .configs import ArithmeticConfig, load_config
from .evaluate import load_experiment
from .experiments.arithmetic import prepare_data
from .plots import plot_figure5, plot_residuals
from .runs import ensure_run as ensure_run_at

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
# The student report's test accuracies (%) of a model trained and tested on one variant: 4 operations ("four"),
# 4 operations biased, 2 operations, 2 operations biased. Missing: the report has no such number.
REPORT: dict[str, dict[str, str]] = {
    "arith-fc": {"four": "64.58", "four_biased": "62.13"},
    "arith-gru": {"four": "80.73", "four_biased": "75.00", "two": "96.0", "two_biased": "94.2"},
    "arith-stacked-gru": {"four": "85.0", "four_biased": "82.50"},
    "arith-repeated-gru": {"four": "87.41", "four_biased": "84.9"},
    "arith-deq": {"four": "87.62", "four_biased": "85.9", "two": "96.3", "two_biased": "94.7"},
}
VARIANT_LABELS = {"four": "4 ops", "four_biased": "4 ops biased", "two": "2 ops", "two_biased": "2 ops biased"}


def ensure_run(
    name: str,
    overrides: Sequence[str],
    output_dir: Path,
    data_dir: Path,
    progress: bool,
    trusted_modules: Collection[str] = (),
) -> dict[str, Any]:
    """The results of run ``name`` in OUTPUT/name (see :func:`deq_toy.runs.ensure_run`)."""
    return ensure_run_at(output_dir / name, name, overrides, data_dir, progress, trusted_modules)


def synthetic(output_dir: Path, overrides: Sequence[str], progress: bool, trusted_modules: Collection[str] = ()) -> str:
    """Train the three gammas; write table.md and figure5.png; return the table. ``trusted_modules``: the modules
    whose solvers the runs' saved configs may name by import path (none else is imported)."""
    rows = []
    models = []
    for name in SYNTHETIC_RUNS:
        res = ensure_run(name, overrides, output_dir, output_dir, progress, trusted_modules)
        rows.append(
            f"| {res['jacobian_weight']:g} | {res['mse']:.4f} | {res['nfe_fixed_point_mean']:.2f} | "
            f"{res['nfe_fixed_point_max']:.0f} | {res['nfe_broyden_mean']:.2f} | {res['dfdz_mean']:.3f} | "
            f"{res['dfdz_max']:.3f} |"
        )
        _, experiment = load_experiment(output_dir / name, trusted_modules=trusted_modules)
        models.append((f"gamma = {res['jacobian_weight']:g}", experiment.model))
    plot_figure5(models, output_dir / "figure5.png")
    header = (
        "| gamma | valid MSE | NFE fixed-point (mean) | NFE fixed-point (max) | NFE Broyden (mean) | "
        "mean abs(df/dz) at z* | max abs(df/dz) at z* |\n|---|---|---|---|---|---|---|"
    )
    return header + "\n" + "\n".join(rows) + "\n"


def _acc(res: dict[str, Any], key: str) -> str:
    return f"{res[key]['acc']:.2f}" if key in res else "n/a"


def arithmetic_header(long_length: int = 41) -> str:
    """The header of the arithmetic table (see :func:`arithmetic_row`)."""
    return (
        "| model | trained on | readout | test acc | precision | recall | test acc 4 ops | 4 ops biased | 2 ops | "
        f"2 ops biased | longer ({long_length}) acc | residual (test) | NFE (test) | report: test acc |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )


def arithmetic_row(name: str, res: dict[str, Any], config: ArithmeticConfig) -> str:
    """One Markdown table row from a run's results.json and config (accuracy, precision, recall in %).

    "test" is the test set of the variant the run was trained on; the next four columns are the accuracies on the
    test set of every variant; "longer" is the test set of the training variant with ``data.long_length`` symbols
    (n/a for the flatten readout); the report's number is that of the same model trained on the same variant."""
    variant = config.data.variant
    test = res[f"test_{variant}"]
    residual = f"{test['residual']:.3g}" if "residual" in test else "-"
    nfe = f"{test['nfe_forward']:.1f}" if "nfe_forward" in test else "-"
    others = " | ".join(_acc(res, f"test_{v}") for v in VARIANT_LABELS)
    return (
        f"| {ARITHMETIC_LABELS[name]} | {VARIANT_LABELS[variant]} | {config.model.readout} | "
        f"{test['acc']:.2f} | {test['precision']:.2f} | {test['recall']:.2f} | {others} | "
        f"{_acc(res, f'test_longer_{variant}')} | {residual} | {nfe} | {REPORT.get(name, {}).get(variant, '-')} |"
    )


def _names(text: str | None, known: Sequence[str], what: str) -> list[str]:
    """Comma-separated names, each one of ``known`` (all of them when ``text`` is None)."""
    if text is None:
        return list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError(f"unknown {what} {bad or text!r}; choose from {', '.join(known)} (comma-separated).")
    return names


def arithmetic_runs(
    output_dir: Path, runs: str | None, variants: str | None, overrides: Sequence[str]
) -> list[tuple[str, Path, list[str]]]:
    """(preset, parent folder, overrides) of every run of the table, in table order (variant by variant); the run's
    folder is PARENT/PRESET."""
    names = _names(runs, ARITHMETIC_RUNS, "arithmetic runs")
    if variants is None:
        return [(name, output_dir, list(overrides)) for name in names]
    if any(o.split("=", 1)[0].strip() in ("variant", "data.variant") for o in overrides):
        raise UsageError("give the training variants either with --variants or with data.variant=..., not both.")
    chosen = _names(variants, list(VARIANT_LABELS), "variants")
    return [(n, output_dir / v, [*overrides, f"data.variant={v}"]) for v in chosen for n in names]


def arithmetic(
    output_dir: Path,
    data_dir: Path,
    overrides: Sequence[str],
    progress: bool,
    runs: str | None = None,
    variants: str | None = None,
    name: str = "table",
    trusted_modules: Collection[str] = (),
) -> str:
    """Train (or read) the selected runs; write NAME_residual.png; return the table (main writes it to NAME.md).
    ``trusted_modules``: the modules whose solvers the runs' saved configs may name by import path."""
    selected = arithmetic_runs(output_dir, runs, variants, overrides)
    rows, curves, long_length = [], {}, 41
    for preset, folder, run_overrides in selected:
        res = ensure_run(preset, run_overrides, folder, data_dir, progress, trusted_modules)
        config = load_config(preset, run_overrides)  # what ensure_run checked the run's saved config against
        assert isinstance(config, ArithmeticConfig)
        long_length = config.data.long_length
        rows.append(arithmetic_row(preset, res, config))
        if config.model.name in ("deq", "repeated_gru"):
            label = ARITHMETIC_LABELS[preset]
            if variants is not None:
                label += f" ({VARIANT_LABELS[config.data.variant]})"
            curves[label] = read_metrics(folder / preset / "metrics.jsonl")
    if curves:
        plot_residuals(curves, output_dir / f"{name}_residual.png")
    return "\n".join([arithmetic_header(long_length), *rows]) + "\n"


def prepare_arithmetic_data(
    output_dir: Path, data_dir: Path, overrides: Sequence[str], runs: str | None, variants: str | None
) -> list[Path]:
    """Generate (when missing) every data file the selected runs read; returns their paths."""
    paths: list[Path] = []
    for preset, _, run_overrides in arithmetic_runs(output_dir, runs, variants, overrides):
        config = load_config(preset, run_overrides)
        assert isinstance(config, ArithmeticConfig)
        paths += [p for p in prepare_data(data_dir, config) if p not in paths]
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deq_toy.reproduce", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=("synthetic", "arithmetic"))
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--data-dir", default=None, help="arithmetic data (default: OUTPUT_DIR/data)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--runs", default=None, help="arithmetic: comma-separated presets (default: all six)")
    parser.add_argument(
        "--variants", default=None, help="arithmetic: train every run on each of these variants (DIR/VARIANT/PRESET)"
    )
    parser.add_argument("--name", default="table", help="arithmetic: file names NAME.md, NAME_residual.png")
    parser.add_argument(
        "--prepare-data", action="store_true", help="arithmetic: only generate the data files of the runs, then exit"
    )
    add_trust_option(parser)
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every run")
    args = parser.parse_intermixed_args(argv)
    output_dir = Path(args.output_dir)
    name = "table"
    command = "python -m deq_toy.reproduce " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        check_writable(output_dir)
        if args.table == "synthetic":
            if args.runs or args.variants or args.prepare_data or args.name != "table":
                raise UsageError("--runs, --variants, --name and --prepare-data apply to the arithmetic tables only.")
            table = synthetic(output_dir, args.overrides, not args.no_progress, args.trust_solver)
        else:
            data_dir = Path(args.data_dir) if args.data_dir else output_dir / "data"
            if args.prepare_data:
                paths = prepare_arithmetic_data(output_dir, data_dir, args.overrides, args.runs, args.variants)
                print(f"{len(paths)} data files ready under {data_dir}")
                return 0
            name = args.name
            if not name or "/" in name or "\\" in name:
                raise UsageError(f"--name must be a plain file name without a folder, got {name!r}.")
            table = arithmetic(
                output_dir, data_dir, args.overrides, not args.no_progress, args.runs, args.variants, name,
                args.trust_solver,
            )  # fmt: skip
    except UsageError as err:
        return usage_error(parser.prog, err)
    try:
        write_text(output_dir / f"{name}.md", f"Command: `{command}`\n\n{table}")
    except UsageError as err:
        return usage_error(parser.prog, err)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
