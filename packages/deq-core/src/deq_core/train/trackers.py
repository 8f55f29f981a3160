"""Experiment trackers of a training run, through Accelerate's ``log_with`` (TensorBoard, Weights & Biases, MLflow,
Aim, Comet, ...): what the training skeleton (:mod:`deq_core.train.trainer`) hands to them.

- :func:`tracker_names`: the names Accelerate knows; :func:`check_tracker_names` and :func:`check_project` check the
  ``run.log_with`` and ``run.project`` settings; :func:`check_trackers_installed` says in one line what to install.
- :func:`hyperparameters`: a config as flat dotted keys with values every tracker accepts (TensorBoard's hparams take
  numbers, bools and strings only: anything else becomes its text).
- :func:`tracker_values`: a metrics.jsonl record as the trackers' scalars, ``{split}/{key}`` (``train/loss``,
  ``valid/ppl``): its numbers only, at the record's step.
- :func:`check_tracker_folders`: refuse a symbolic link where the trackers write (OUTPUT_DIR/trackers and the
  folders in it), so that nothing is written outside the run folder.
- :func:`tracker_init_kwargs`: where each tracker writes (inside the run folder, :data:`TRACKERS_DIR`) and how a
  resumed run continues (TensorBoard: the events a killed session wrote after its last checkpoint are purged;
  Weights & Biases: the same run id, kept in config.json under :data:`TRACKER_ID_KEY`).
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import UsageError
from .files import OutputError
from .run_config import flat_dict

__all__ = [
    "TRACKERS_DIR",
    "TRACKER_ID_KEY",
    "check_project",
    "check_tracker_folders",
    "check_tracker_names",
    "check_trackers_installed",
    "hyperparameters",
    "tracker_init_kwargs",
    "tracker_names",
    "tracker_values",
]

TRACKERS_DIR = "trackers"
"""The folder of OUTPUT_DIR the trackers write into (Accelerate's ``logging_dir``): TensorBoard's event files go to
OUTPUT_DIR/trackers/PROJECT/."""

TRACKER_ID_KEY = "tracker_run_id"
"""The top-level entry of config.json with the run's id for trackers that continue a run by id (Weights & Biases)."""


def tracker_names() -> tuple[str, ...]:
    """The trackers the installed Accelerate knows (its ``LoggerType`` values, without "all")."""
    from accelerate.utils import LoggerType

    return tuple(t.value for t in LoggerType if t.value != "all")


def check_tracker_names(names: Iterable[str]) -> None:
    """Raise ValueError (naming ``log_with``, for a config section's check) for a name that is not a tracker."""
    names = list(names)
    if not names:
        return
    known = tracker_names()
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"log_with: unknown tracker {name!r}{hint}; trackers: {', '.join(known)}.")


def check_project(project: str | None) -> None:
    """Raise ValueError (naming ``project``) unless ``project`` is None or a name usable as one folder (TensorBoard
    writes into OUTPUT_DIR/trackers/PROJECT)."""
    if project is None:
        return
    if not isinstance(project, str) or project.strip() in ("", ".", "..") or any(c in project for c in "/\\"):
        raise ValueError(f"project must be a name without '/' or '\\' (or none: the preset's name), got {project!r}.")


def check_trackers_installed(names: Iterable[str]) -> None:
    """Raise UsageError for the first tracker of ``names`` whose package is not installed (Accelerate itself would
    drop it silently): ``run.log_with=wandb needs the wandb package: pip install wandb``."""
    from accelerate.tracking import get_available_trackers

    available = {str(t) for t in get_available_trackers()}
    for name in names:
        if name not in available:
            raise UsageError(f"run.log_with={name} needs the {name} package: pip install {name}")


def check_tracker_folders(output_dir: str | Path) -> None:
    """Refuse a symbolic link at OUTPUT_DIR/trackers or directly in it (TensorBoard's PROJECT folder, ``wandb``,
    ``mlflow``): the trackers would write their files where it points. Call it before the trackers start.

    Raises:
        OutputError: naming the first link (sorted) and what to do.
    """
    folder = Path(output_dir) / TRACKERS_DIR
    found = [folder] if folder.is_symlink() else []
    if not found and folder.is_dir():
        found = sorted(p for p in folder.iterdir() if p.is_symlink())
    if found:
        raise OutputError(
            f"{found[0]} is a symbolic link; the trackers write only inside the run folder, never through a link: "
            "replace the link with the folder it points to, or choose another --output-dir."
        )


def _plain(value: Any) -> bool | int | float | str:
    if isinstance(value, (bool, int, float, str)):
        return value
    return "none" if value is None else str(value)


def hyperparameters(config: Any, **extra: Any) -> dict[str, bool | int | float | str]:
    """The settings of ``config`` (a dataclass or its dict) by dotted name (``deq.max_iter``) and the ``extra``
    entries, each a number, bool or string (None is "none", a sequence its text): what ``init_trackers`` records as
    the run's hyperparameters."""
    values = {**flat_dict(config), **extra}
    return {key: _plain(value) for key, value in values.items()}


def tracker_values(record: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl record as tracker scalars named ``{split}/{key}`` (bools as 0 / 1); its ``step``
    is the step they are logged at, and its strings (``split``, ``mode``) are no values (the split names the tag)."""
    split = record.get("split", "train")
    values = {}
    for key, value in record.items():
        if key in ("step", "split") or not isinstance(value, numbers.Real):
            continue
        values[f"{split}/{key}"] = float(value)
    return values


def tracker_init_kwargs(
    names: Iterable[str], output_dir: str | Path, first_step: int, run_id: str | None
) -> dict[str, dict[str, Any]]:
    """Accelerate's ``init_kwargs`` of ``init_trackers`` for the trackers ``names`` of the run in ``output_dir`` whose
    first step logged in this session is ``first_step`` (1 for a new run, the checkpoint's step + 1 on resume).

    TensorBoard: ``purge_step``, so that the events of steps from ``first_step`` on written by an earlier session
    (killed after its last checkpoint) are hidden and each step is shown once. Weights & Biases: its files under
    OUTPUT_DIR/trackers/ and the run ``run_id`` (continued on resume). MLflow: its artifacts there."""
    folder = Path(output_dir) / TRACKERS_DIR
    kwargs: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "tensorboard":
            kwargs[name] = {"purge_step": first_step}
        elif name == "wandb":
            kwargs[name] = {"dir": str(folder), "name": Path(output_dir).name}
            if run_id:
                kwargs[name].update(id=run_id, resume="allow")
        elif name == "mlflow":
            kwargs[name] = {"logging_dir": str(folder / "mlflow"), "run_name": Path(output_dir).name}
    return kwargs
