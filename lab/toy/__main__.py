"""``python -m lab.toy claims --output-dir DIR [--quick] [--claims GROUPS] [--no-progress]``

Trains what the papers' claims need and writes DIR/claims.md and DIR/synthetic_ablation.md (see
:mod:`lab.toy.claims`): runs under DIR/synthetic/ and DIR/arithmetic/, data under DIR/data/; finished runs (with
results.json) are read, interrupted ones resumed. ``--quick``: a minutes-long smoke version on tiny data;
``--claims synthetic,arithmetic,repeated`` selects groups (default: all), the others' rows are NOT MEASURED.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deq_core.train.cli import usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import check_writable

from .claims import GROUPS, run_claims


def claim_groups(text: str | None) -> tuple[str, ...]:
    """The groups of ``--claims`` (comma-separated, each one of :data:`~lab.toy.claims.GROUPS`; all when None)."""
    if text is None:
        return GROUPS
    groups = tuple(g.strip() for g in text.split(",") if g.strip())
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        choices = ", ".join(GROUPS)
        raise UsageError(f"unknown claim groups {unknown or text!r}; choose from {choices} (comma-separated).")
    return groups


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.toy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("claims",))
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--quick", action="store_true", help="minutes-long smoke version (tiny data)")
    parser.add_argument("--claims", default=None, help="comma-separated groups to measure (default: all of them)")
    parser.add_argument("--no-progress", action="store_true")
    args, unknown = parser.parse_known_args(argv)
    output_dir = Path(args.output_dir)
    command = "python -m lab.toy " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        check_writable(output_dir)
        if unknown:
            raise UsageError("claims takes only --output-dir, --quick, --claims and --no-progress.")
        run_claims(output_dir, args.quick, not args.no_progress, command, claim_groups(args.claims))
    except UsageError as err:
        return usage_error(parser.prog, err)
    print((output_dir / "claims.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
