"""How many processes a launcher started: ``accelerate launch --num_processes N`` and ``torchrun --nproc_per_node N``
set ``WORLD_SIZE`` in every process they start. A training script whose loop does not join them must say so instead
of letting each process train alone (:func:`require_one_process`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import UsageError


def launched_processes(environ: Mapping[str, str] | None = None) -> int:
    """The number of processes the launcher started (``WORLD_SIZE``; 1 when the script was run directly).

    Raises:
        UsageError: ``WORLD_SIZE`` is not a positive integer.
    """
    text = (os.environ if environ is None else environ).get("WORLD_SIZE", "1")
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"WORLD_SIZE must be a positive integer (the number of processes), got {text!r}.")
    return int(text)


def require_one_process(tool: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a multi-process launch of ``tool`` (e.g. ``"python -m deq_toy.train"``), whose loop runs in one process.

    Raises:
        UsageError: the launcher started more than one process (one line saying how to run ``tool`` instead).
    """
    n = launched_processes(environ)
    if n > 1:
        raise UsageError(
            f"{tool} trains in one process and cannot join the {n} processes this launcher started (each would "
            f"train alone); run `{tool} ...` directly, without accelerate launch / torchrun."
        )
