"""``python -m deq_toy.train --config NAME [--data-dir DIR] [--output-dir DIR] [--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (``accelerate launch --multi_gpu --num_processes 2 -m deq_toy.train
...`` on CPU: the processes join and each takes its rows of every batch)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from deq_core.train.errors import UsageError

from .configs import PRESETS, load_config
from .loop import run_training


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deq_toy.train",
        description="Train one deq-toy preset. Presets: " + ", ".join(sorted(PRESETS)) + ".",
    )
    parser.add_argument("--config", required=True, help="preset name (see the list above)")
    parser.add_argument("--data-dir", default="data", help="arithmetic data files are read here, generated if missing")
    parser.add_argument("--output-dir", default=None, help="run folder (default: runs/NAME)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many steps in all (resumable)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides, e.g. lr=1e-3 epochs=5")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for a user error, printed without a traceback)."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        output_dir = args.output_dir or f"runs/{args.config}"
        results = run_training(
            config,
            output_dir,
            args.data_dir,
            resume=args.resume,
            stop_after=args.stop_after,
            progress=not args.no_progress,
            name=args.config,
        )
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if results:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
