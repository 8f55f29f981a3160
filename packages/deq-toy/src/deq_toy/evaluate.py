"""``python -m deq_toy.evaluate --checkpoint RUN_DIR [--data-dir DIR] [--split valid|test] [--max-iters 5,10,50]
[--tols 1e-2,1e-3]``: load a run's checkpoint, report its metric, and sweep the solver's iteration limit and
tolerance (DEQ models; the parameters do not depend on them, so one trained model serves every setting, each a
:class:`deq_core.Plan` set on its DEQ layer)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from deq_core import Plan, use_plan
from deq_core.train import UsageError, replace_config
from deq_core.train.checkpoints import load_weights
from deq_core.train.cli import add_trust_option, counts, leave_working_directory, tolerances, usage_error
from deq_core.train.files import write_json
from deq_core.train.reports import markdown_table

from .checkpoint import load_checkpoint
from .configs import ArithmeticConfig, Config, config_from_dict
from .experiments import build_experiment
from .experiments.arithmetic import ArithmeticExperiment, load_tensors


def load_experiment(
    checkpoint: str | Path,
    data_dir: str | Path = "data",
    changes: Mapping[str, Any] | None = None,
    trusted_modules: Collection[str] = (),
) -> tuple[Config, Any]:
    """The experiment of a run with its trained weights (settings in ``changes`` replaced, by dotted name, e.g.
    ``{"deq.max_iter": 10}``); ``trusted_modules``: the modules whose solvers the saved config may name by import
    path (none else is imported).

    Raises:
        UsageError: no usable checkpoint (CheckpointError: also weights that do not fit the model config.json
            describes, or that hold NaN), or (UntrustedImportError) a solver of a module not in ``trusted_modules``.
    """
    state = load_checkpoint(checkpoint)
    config = replace_config(config_from_dict(state["config"], trusted_modules, state["run_dir"]), changes or {})
    experiment = build_experiment(config, Path(data_dir))
    load_weights(experiment.model, state["weights_file"], lambda: experiment.model.load_state_dict(state["model"]))
    experiment.model.eval()
    return config, experiment


def evaluate_run(
    checkpoint: str | Path,
    data_dir: str | Path = "data",
    split: str = "valid",
    changes: Mapping[str, Any] | None = None,
    trusted_modules: Collection[str] = (),
) -> dict[str, float]:
    """Metrics of a trained run on ``split`` ("valid", or "test" for arithmetic) with optional config changes (by
    dotted name) and the modules a saved solver import path may name, as :func:`load_experiment`."""
    config, experiment = load_experiment(checkpoint, data_dir, changes, trusted_modules)
    return evaluate_experiment(config, experiment, split, data_dir)


def evaluate_experiment(config: Config, experiment: Any, split: str, data_dir: str | Path = "data") -> dict[str, float]:
    """Metrics of a loaded experiment (:func:`load_experiment`) on ``split``: "valid", or "test" for arithmetic (read
    from ``data_dir``). Its DEQ layer solves to its own limits, or to those of a :class:`deq_core.Plan` set on it."""
    if split == "valid":
        return experiment.evaluate()
    if isinstance(config, ArithmeticConfig) and split == "test":
        assert isinstance(experiment, ArithmeticExperiment)
        data = config.data
        tokens, labels = load_tensors(Path(data_dir), config, data.variant, "test", data.n_test, data.length)
        return experiment.evaluate_tensors(tokens, labels)
    raise UsageError(f"unknown split {split!r} for this task; use 'valid' (both tasks) or 'test' (arithmetic).")


def sweep(
    checkpoint: str | Path,
    data_dir: str | Path,
    split: str,
    max_iters: Sequence[int],
    tols: Sequence[float],
    trusted_modules: Collection[str] = (),
) -> list[dict[str, Any]]:
    """One row per (max_iter, tol): the settings and the metrics of the run, loaded once, its DEQ layer solving to
    those limits (a :class:`deq_core.Plan`; ``trusted_modules`` as for :func:`load_experiment`)."""
    config, experiment = load_experiment(checkpoint, data_dir, None, trusted_modules)
    rows = []
    for max_iter in max_iters:
        for tol in tols:
            with use_plan(experiment.model, Plan(max_iter=max_iter, tol=tol)):
                metrics = evaluate_experiment(config, experiment, split, data_dir)
            rows.append({"max_iter": max_iter, "tol": tol, **metrics})
    return rows


def markdown(rows: list[dict[str, Any]], keys: Sequence[str]) -> str:
    """A Markdown table of ``keys`` (missing entries shown as '-')."""
    cells = [[f"{row[k]:.4g}" if isinstance(row.get(k), float) else str(row.get(k, "-")) for k in keys] for row in rows]
    return markdown_table(keys, cells).rstrip("\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deq_toy.evaluate", description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="a run's output directory or RUN/checkpoints/step_N")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--split", default="valid", help="valid, or test (arithmetic)")
    parser.add_argument("--max-iters", default="", help="comma-separated solver iteration limits to sweep")
    parser.add_argument("--tols", default="", help="comma-separated solver tolerances to sweep")
    parser.add_argument("--output", default=None, help="also write the results as JSON here")
    add_trust_option(parser)
    args = parser.parse_args(argv)
    trusted = args.trust_solver
    try:
        leave_working_directory(trusted, args.checkpoint)
        torch.set_num_threads(1)
        max_iters, tols = counts(args.max_iters, "--max-iters"), tolerances(args.tols, "--tols")
        result: dict[str, Any] = {"metrics": evaluate_run(args.checkpoint, args.data_dir, args.split, None, trusted)}
        print(json.dumps(result["metrics"], indent=2))
        if max_iters or tols:
            state = load_checkpoint(args.checkpoint)
            config = config_from_dict(state["config"], trusted, state["run_dir"])
            max_iters = max_iters or [config.deq.max_iter]
            tols = tols or [config.deq.tol]
            rows = sweep(args.checkpoint, args.data_dir, args.split, max_iters, tols, trusted)
            result["sweep"] = rows
            keys = ["max_iter", "tol"] + [k for k in rows[0] if k not in ("max_iter", "tol")]
            print(markdown(rows, keys))
        if args.output:
            write_json(args.output, result, indent=2, option="--output")
    except UsageError as err:
        return usage_error(parser.prog, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
