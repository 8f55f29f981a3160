"""Train-or-read one run folder: the resumable building block of ``reproduce``."""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from deq_core.train import UsageError, replace_config
from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.run_config import RUN_RESUMABLE

from .configs import config_from_dict, load_config
from .loop import RESUMABLE_CHANGES, run_training


def ensure_run(
    run_dir: Path,
    preset: str,
    overrides: Sequence[str],
    data_dir: Path,
    progress: bool,
    trusted_modules: Collection[str] = (),
) -> dict[str, Any]:
    """The results of the run of ``preset`` + ``overrides`` in ``run_dir``: read from RUN_DIR/results.json when the
    run finished (with the same config, up to the settings that change nothing computed: ``RESUMABLE_CHANGES``, e.g.
    the ``run.stop_after`` of a run stopped and resumed), resumed from its checkpoint when interrupted, else trained
    from scratch. ``trusted_modules``: the modules whose solvers the run's saved config may name by import path
    (none else is imported).

    Raises:
        UsageError: a finished run with another config, a solver of a module not in ``trusted_modules``
            (UntrustedImportError), or what :func:`deq_toy.loop.run_training` raises.
    """
    run_dir = Path(run_dir)
    results_path = run_dir / "results.json"
    config = load_config(preset, overrides)
    if results_path.exists():
        stored = config_from_dict(json.loads((run_dir / "config.json").read_text())["config"], trusted_modules, run_dir)
        unchanged = {
            key: functools.reduce(getattr, key.split("."), config) for key in RESUMABLE_CHANGES | RUN_RESUMABLE
        }
        if replace_config(stored, unchanged) != config:  # fields added since the run was stored take their defaults
            raise UsageError(
                f"{run_dir} holds a finished run with another config; use the same overrides as that "
                "run, or another --output-dir."
            )
        return json.loads(results_path.read_text())
    resume = latest_complete_checkpoint(run_dir) is not None
    return run_training(
        config, run_dir, data_dir, resume=resume, progress=progress, name=preset, trusted_modules=trusted_modules
    )
