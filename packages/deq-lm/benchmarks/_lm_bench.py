"""Helpers shared by the deq-lm benchmarks (``memory.py``, ``speed.py``): Markdown output, units, timing.

Not a benchmark itself: ``nox -s bench`` runs ``benchmarks/[!_]*.py``, so this module (leading underscore) is only
imported. The scripts put their own folder first on ``sys.path`` when run as ``python benchmarks/<name>.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from deq_core.train.reports import MarkdownReport

MIB = 2.0**20
GIB = 2.0**30


def note(text: str) -> None:
    """A progress message on stderr (stdout stays pure Markdown)."""
    print(text, file=sys.stderr, flush=True)


def mib(n_bytes: float) -> str:
    """``n_bytes`` in MiB with one decimal."""
    return f"{n_bytes / MIB:,.1f}"


def gib(n_bytes: float) -> str:
    """``n_bytes`` in GiB with two decimals."""
    return f"{n_bytes / GIB:.2f}"


def percent(fraction: float) -> str:
    """A fraction as a percentage with one decimal, e.g. 0.8123 -> '81.2%'."""
    return f"{100 * fraction:.1f}%"


Report = MarkdownReport  # printed as it goes, written to --out at the end


def command_line(script: str, argv: Sequence[str]) -> str:
    """The command that reproduces this run (from the repository root), as a Markdown code line."""
    words = ["OMP_NUM_THREADS=1", "python", f"packages/deq-lm/benchmarks/{script}", *argv]
    return "Command: `" + " ".join(words) + "`"


def synchronize() -> None:
    """Wait for the work queued on every CUDA device in use (a no-op on CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


def seconds(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of ``fn`` (on CUDA including the device's work)."""
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
