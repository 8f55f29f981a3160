"""``python -m deq_toy.train --config NAME [--data-dir DIR] [--output-dir DIR] [--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (``accelerate launch --multi_gpu --num_processes 2 -m deq_toy.train
...`` on CPU: the processes join and each takes its rows of every batch)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deq_core.train import check_count, run_training_cli, training_parser

from .configs import PRESETS, Config, load_config
from .loop import run_training


def build_parser() -> argparse.ArgumentParser:
    parser = training_parser(
        "python -m deq_toy.train", "Train one deq-toy preset: --config NAME, then key=value overrides of its settings "
        "(threads: run.threads=N).", sorted(PRESETS), threads=False,
    )  # fmt: skip
    parser.add_argument("--data-dir", default="data", help="arithmetic data files are read here, generated if missing")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many steps in all (resumable)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _train(config: Config, output_dir: Path, args: argparse.Namespace) -> None:
    """Train ``config`` in ``output_dir``. The console's last line is the run's final summary (printed by the
    training skeleton); the full results are in OUTPUT_DIR/results.json."""
    run_training(config, output_dir, args.data_dir, resume=args.resume, stop_after=args.stop_after,
                 progress=not args.no_progress, name=args.config, trusted_modules=args.trust_solver)  # fmt: skip


def _configure(args: argparse.Namespace) -> Config:
    """The preset with the overrides; ``--stop-after`` checked (it sets ``run.stop_after`` when training starts)."""
    if args.stop_after is not None:
        check_count(args.stop_after, "--stop-after", minimum=0)
    return load_config(args.config, args.overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for a user error, printed on one line)."""
    return run_training_cli(build_parser(), argv, _configure, _train)


if __name__ == "__main__":
    sys.exit(main())
