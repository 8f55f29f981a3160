"""The command line every task package's ``train`` module shares:

    python -m deq_X.train --config NAME [--output-dir DIR] [--resume] [--threads N] [--trust-solver MODULE ...]
        [TASK OPTIONS] [key=value ...]

:func:`training_parser` builds the parser (the task adds its own options, e.g. ``--data-dir``), and
:func:`run_training_cli` runs it: the config from the preset and the overrides, the thread count, the output folder
(default ``runs/CONFIG``), then the task's training; a bad setting or any :class:`~deq_core.train.errors.UsageError`
is one line ``PROG: error: ...`` and exit status 2, never a traceback; a run stopped because another process stopped
answering or died (:class:`~deq_core.train.launch.ProcessTimeoutError`,
:class:`~deq_core.train.launch.ProcessLostError`, whose line the skeleton printed) is exit status 1.
:func:`usage_error` prints that line and gives that status, also for the task packages' ``evaluate`` and
``reproduce`` command lines. :func:`leave_working_directory` takes the working directory off ``sys.path`` once a
command line has imported the modules it names: no module imported later is read from the folder it runs in.
:func:`add_trust_option` adds ``--trust-solver MODULE``, the modules whose solvers a run's saved config.json may name
by import path (on ``--resume`` and in ``evaluate``; :mod:`~deq_core.train.trust`).
The numbers of the command lines are checked by :func:`set_threads` (``--threads``, bounded by the machine's cores),
:func:`counts` (``--max-iters``), :func:`tolerances` (``--tols``) and :func:`check_count` (``--batch-size``, ...), each
a :class:`~deq_core.train.errors.UsageError` naming the option.
:func:`add_device_argument` adds the benchmark scripts' ``--device`` option, a device name checked by
:func:`resolve_device` against what this machine has.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoints import CHECKPOINT_DIR, CONFIG_FILE
from .checks import INT_LIMIT
from .errors import UsageError
from .launch import ProcessLostError, ProcessTimeoutError
from .trust import TRUST_OPTION, import_trusted

__all__ = [
    "MAX_SWEEP_LIMIT",
    "THREADS_PER_CORE",
    "add_device_argument",
    "add_trust_option",
    "check_count",
    "counts",
    "leave_working_directory",
    "module_name",
    "out_of_memory_line",
    "resolve_device",
    "run_training_cli",
    "set_threads",
    "tolerances",
    "training_parser",
    "usage_error",
]

_OVERRIDES_HELP = (
    "settings by dotted name, e.g. optim.steps=200 optim.lr=3e-4 deq.max_iter=12; a name only one section has may "
    "omit it (steps=200 lr=3e-4), model=NAME sets model.name"
)


def training_parser(
    prog: str, description: str, presets: Iterable[str], default: str | None = None, threads: bool = True
) -> argparse.ArgumentParser:
    """The shared options: ``--config`` (one of ``presets``; ``default`` when given, else required),
    ``--output-dir``, ``--resume``, ``--threads`` (unless ``threads`` is False, for a task whose config sets its
    threads), ``--trust-solver`` (:func:`add_trust_option`; pass ``args.trust_solver`` to the skeleton's ``train``)
    and the ``key=value`` overrides. Add the task's own options to the returned parser."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    names = ", ".join(presets)
    if default is None:
        parser.add_argument("--config", required=True, help=f"preset name, one of: {names}")
    else:
        parser.add_argument("--config", default=default, help=f"preset name (default {default}); one of: {names}")
    parser.add_argument("--output-dir", type=Path, default=None, help="run folder (default runs/CONFIG)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint")
    if threads:
        parser.add_argument(
            "--threads", type=int, default=0, help="torch threads per process (default: torch's choice; at most "
            f"{THREADS_PER_CORE} per core); 1 is often fastest for small models on a busy machine",
        )  # fmt: skip
    add_trust_option(parser)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help=_OVERRIDES_HELP)
    return parser


def run_training_cli(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    configure: Callable[[argparse.Namespace], Any],
    train: Callable[[Any, Path, argparse.Namespace], Any],
) -> int:
    """Parse ``argv``, import the ``--trust-solver`` modules (as installed, never from the output folder:
    :func:`~deq_core.train.trust.import_trusted`), build the config with ``configure(args)`` (the preset with the
    overrides and the task's options applied), set ``--threads`` (:func:`set_threads`), and call
    ``train(config, output_dir, args)``.
    Returns the exit status: 0, or 2 after printing ``PROG: error: MESSAGE`` (one line, no traceback) for a
    ValueError from ``configure`` or a UsageError from either (argparse itself exits with status 2 on an unknown
    option), or 1 when another process of the run stopped answering or died
    (:class:`~deq_core.train.launch.ProcessTimeoutError`, :class:`~deq_core.train.launch.ProcessLostError`: its line
    is printed already). A run that needs more memory than the machine has is one line too (:func:`out_of_memory_line`),
    exit status 2."""
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir or Path("runs") / args.config)
    for stream in (sys.stdout, sys.stderr):  # a folder name the terminal cannot show is escaped, never a traceback
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        import_trusted(getattr(args, "trust_solver", []), output_dir)  # before the config imports one
        config = configure(args)  # imports the solver a new run names on the command line
        leave_working_directory()
        set_threads(getattr(args, "threads", 0))
    except (ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    try:
        train(config, output_dir, args)
    except UsageError as err:
        return usage_error(parser.prog, err)
    except (ProcessTimeoutError, ProcessLostError):
        return 1
    except (MemoryError, RuntimeError) as err:
        line = out_of_memory_line(err)
        if line is None:
            raise
        return usage_error(parser.prog, line)
    return 0


def leave_working_directory(trusted_modules: Iterable[str] = (), run: str | Path | None = None) -> None:
    """Import the ``--trust-solver`` modules ``trusted_modules`` as the environment has them, never from the run folder
    of ``run`` (a run folder or one of its checkpoint folders; :func:`~deq_core.train.trust.import_trusted`), then
    take the working directory off ``sys.path``, where ``python -m`` put it first. A command line calls it once it has
    imported the modules it names (a new run's solver is imported when its config is built). A module imported later
    (matplotlib for a plot, sympy or triton inside torch) is then never a file of the folder the command runs in: a
    data folder, a download. The console scripts (``deq-toy-train``, ...) and ``python -P`` leave it off from the
    start; modules imported before this call (a ``torch.py`` there) cannot be helped.

    Raises:
        UntrustedImportError: a trusted module found only in the run folder.
    """
    if run is not None:
        run = Path(os.path.realpath(run))
        inside = run.parent.name == CHECKPOINT_DIR and os.path.isfile(run.parent.parent / CONFIG_FILE)
        import_trusted(trusted_modules, run.parent.parent if inside else run)  # RUN/checkpoints/step_N: RUN
    if sys.path and sys.path[0] in ("", os.getcwd(), os.path.realpath(os.getcwd())):
        del sys.path[0]


def out_of_memory_line(err: BaseException) -> str | None:
    """The one line of a run that asked for more memory than the machine has (a ``MemoryError``, or torch's
    allocator failing: a setting below the integer limit, such as ``data.n_train=2000000000``, can still need more
    than the machine's memory), or None when ``err`` is something else."""
    reason = (str(err).strip().splitlines() or [type(err).__name__])[-1]
    if isinstance(err, MemoryError):
        reason = f"MemoryError {reason}" if reason != "MemoryError" else reason
    elif not ("can't allocate memory" in reason or "out of memory" in reason.lower()):
        return None
    if len(reason) > 160:
        reason = reason[:160] + " ..."
    return (
        f"not enough memory for this run ({reason}); a setting asks for more than the machine has: lower the sizes "
        "(optim.batch_size, the model's widths and depths, the data's sizes) and run again."
    )


def usage_error(prog: str, err: Exception | str) -> int:
    """Print ``PROG: error: MESSAGE`` (one line, as argparse words its own errors) to stderr and return the exit
    status 2, for a command line's ``main()`` to return: ``return usage_error(parser.prog, err)``."""
    print(f"{prog}: error: {err}", file=sys.stderr)
    return 2


THREADS_PER_CORE = 4
"""The most torch threads :func:`set_threads` allows per core of the machine: more only slow a run down, and a count
far beyond the cores (``--threads 100000``) makes OpenMP fail (a MemoryError, an abort or a segfault)."""


def set_threads(threads: int, option: str = "--threads") -> None:
    """Set torch's intra-op thread count to ``threads`` (0: leave torch's choice).

    Raises:
        UsageError: a negative count, or more than :data:`THREADS_PER_CORE` per core of this machine
            (``os.cpu_count()``); ``option`` names the setting in the message.
    """
    cores = os.cpu_count() or 1
    most = THREADS_PER_CORE * cores
    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= most:
        raise UsageError(
            f"{option} must be a number of threads from 1 to {most} (at most {THREADS_PER_CORE} per core; this machine "
            f"has {cores}), got {threads}."
        )
    if threads:
        torch.set_num_threads(threads)


MAX_SWEEP_LIMIT = 1000
"""The largest iteration limit an evaluation sweeps (``--max-iters``, deq-vision's ``--max-steps``): a solve that does
not converge runs to its limit on every batch of the evaluation set, so more is a typo that would not end, not a
sweep."""


def counts(text: str, option: str, maximum: int = MAX_SWEEP_LIMIT) -> list[int]:
    """The comma-separated integers from 1 to ``maximum`` of a command-line option (``--max-iters 5,10,50``); empty
    text: [].

    Raises:
        UsageError: anything else, naming ``option``.
    """
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = [0]
    if any(not 1 <= value <= maximum for value in values):
        raise UsageError(
            f"{option} takes comma-separated whole numbers from 1 to {maximum} (e.g. 5,10,50), got {text!r}."
        )
    return values


def tolerances(text: str, option: str) -> list[float]:
    """The comma-separated finite numbers > 0 of a command-line option (``--tols 1e-2,1e-3``); empty text: [].

    Raises:
        UsageError: anything else (0, a negative number, nan, inf, a word), naming ``option``.
    """
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = [0.0]
    if any(not (math.isfinite(value) and value > 0) for value in values):
        raise UsageError(f"{option} takes comma-separated finite numbers > 0 (e.g. 1e-2,1e-3), got {text!r}.")
    return values


def check_count(value: int, option: str, minimum: int = 1, maximum: int = INT_LIMIT - 1) -> int:
    """``value``, a command-line option's whole number (``--batch-size 64``), if it is from ``minimum`` to ``maximum``
    (by default below :data:`~deq_core.train.checks.INT_LIMIT`; a smaller ``maximum`` bounds an option that counts
    passes of work, such as a sweep's points, so that a typo is not a run that never ends).

    Raises:
        UsageError: it is not, naming ``option``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        most = "" if maximum == INT_LIMIT - 1 else f" and at most {maximum}"
        raise UsageError(f"{option} must be a whole number >= {minimum}{most}, got {value}.")
    return value


def module_name(text: str) -> str:
    """``text`` if it is a dotted module name (``pkg.module``): the type of the ``--trust-solver`` option.

    Raises:
        argparse.ArgumentTypeError: an import path with ``:Class``, or anything else that is not a module name.
    """
    if ":" in text:
        module = text.partition(":")[0]
        raise argparse.ArgumentTypeError(f"give the module of the import path, {module!r}, not {text!r}")
    if not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a module name such as my_pkg.my_solvers")
    return text


def add_trust_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--trust-solver MODULE`` (repeatable; ``args.trust_solver``, a list) to ``parser``: the modules whose
    solvers a run's saved config.json may name by import path (``MODULE:Class``). A saved config imports no other
    module; the built-in solvers need none."""
    parser.add_argument(
        TRUST_OPTION, dest="trust_solver", type=module_name, action="append", default=[], metavar="MODULE",
        help="allow the run's saved config.json to name a solver of MODULE by import path (MODULE:Class) on --resume, "
        "in evaluate or export; a saved config imports no other module (repeatable; the built-in solvers need none)",
    )  # fmt: skip


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"`` -> a :class:`torch.device` that exists on this machine.

    Raises:
        ValueError: one line saying what is wrong and how to fix it: an unknown device name, a type other than cpu /
            cuda / mps, or a device this machine does not have (e.g. cuda without a GPU).
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {name!r}: use cpu, cuda, cuda:N or mps") from err
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {name!r} is not available: this machine has no CUDA GPU; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r} is not available: this machine has {count} CUDA GPU(s), cuda:0 to "
                             f"cuda:{count - 1}")  # fmt: skip
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {name!r} is not available: this machine has no MPS backend; use --device cpu")
        return device
    raise ValueError(f"unsupported device type {device.type!r}: use cpu, cuda, cuda:N or mps")


def _device_argument(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_device_argument(parser: argparse.ArgumentParser, default: str = "cpu") -> None:
    """Add ``--device NAME`` (default cpu), parsed by :func:`resolve_device`: a bad or missing device ends the script
    with argparse's one-line error and exit status 2."""
    parser.add_argument(
        "--device",
        type=_device_argument,
        default=resolve_device(default),
        metavar="NAME",
        help=f"where models and data live: cpu, cuda, cuda:N or mps (default {default})",
    )
