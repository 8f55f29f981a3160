"""Run directories of a training script (used by deq-lm and deq-vision), standard library only.

Layout of OUTPUT_DIR::

    config.json                 {"name": preset name, "config": the resolved config dataclass}
    metrics.jsonl               one JSON object per log line (deq_core.experiment.MetricsLog)
    checkpoints/step_0000100/   accelerator.save_state(...): model.safetensors, optimizer, RNG states,
                                custom_checkpoint_*.pkl (objects registered with register_for_checkpointing,
                                e.g. the LR scheduler and a TrainState)

- :class:`TrainState`: the step counter saved with a checkpoint (``accelerator.register_for_checkpointing``).
- :func:`checkpoint_path`, :func:`list_checkpoints`, :func:`latest_checkpoint`, :func:`prune_checkpoints`,
  :func:`resolve_checkpoint`, :func:`checkpoint_weights`: the checkpoint folders of a run.
- :func:`save_config`, :func:`load_config`, :func:`config_changes`, :func:`check_resume_config`: the config file,
  for any config dataclass (with a ``to_dict()`` method or plain fields).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")
CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class TrainState:
    """What Accelerate does not save by itself: the number of optimizer steps taken. Register it with
    ``accelerator.register_for_checkpointing(state)``; it is saved and restored with the checkpoint. Subclass it to
    carry more (extend :meth:`state_dict` / :meth:`load_state_dict`)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


def checkpoint_path(output_dir: Path, step: int) -> Path:
    """OUTPUT_DIR/checkpoints/step_NNNNNNN (zero-padded so that names sort by step)."""
    return Path(output_dir) / CHECKPOINT_DIR / f"step_{step:07d}"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Checkpoint folders of a run, oldest first (an empty list when there are none)."""
    folder = Path(output_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step_"))


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint folder of a run, or None."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def prune_checkpoints(output_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints.

    Raises:
        ValueError: ``keep`` < 1 (the newest checkpoint is never deleted).
    """
    if keep < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep}.")
    for old in list_checkpoints(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def resolve_checkpoint(path: Path) -> tuple[Path, Path]:
    """(run_dir, checkpoint_dir) from either a run directory (its latest checkpoint) or a checkpoint folder.

    Raises:
        FileNotFoundError: neither, or a run directory without checkpoints.
    """
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no checkpoints under {path / CHECKPOINT_DIR}.")
        return path, latest
    run_dir = path.parent.parent
    if not (run_dir / CONFIG_FILE).is_file() or not path.is_dir():
        raise FileNotFoundError(
            f"{path} is neither a run directory (with {CONFIG_FILE}) nor a checkpoint folder inside one "
            f"(RUN/{CHECKPOINT_DIR}/step_N)."
        )
    return run_dir, path


def checkpoint_weights(folder: Path) -> Path:
    """The model weights (``model.safetensors``) Accelerate saved in a checkpoint folder.

    Raises:
        FileNotFoundError: the folder has none (an interrupted save, or not a checkpoint).
    """
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} does not exist: {folder} is not a complete checkpoint.")
    return weights


def _as_dict(cfg: Any) -> dict[str, Any]:
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)


def save_config(cfg: Any, output_dir: Path, name: str) -> Path:
    """Write OUTPUT_DIR/config.json with the preset name and the resolved config; returns its path."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / CONFIG_FILE
    path.write_text(json.dumps({"name": name, "config": _as_dict(cfg)}, indent=2) + "\n")
    return path


def load_config(run_dir: Path, config_cls: type[C]) -> tuple[str, C]:
    """(preset name, config) saved in ``run_dir/config.json``, as an instance of the dataclass ``config_cls``. Keys
    the class no longer has are dropped, fields the file lacks take their defaults, and JSON lists become tuples
    (config dataclasses are frozen).

    Raises:
        FileNotFoundError: no config.json (not a run directory).
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a training run?")
    data = json.loads(path.read_text())
    known = {f.name for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items() if k in known}
    return data.get("name", "?"), config_cls(**values)


def config_changes(saved: Any, current: Any, resumable: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{key: (saved, current)} for settings that differ, except those listed in ``resumable`` (settings that may
    change when a run is resumed because they do not change what is computed)."""
    a, b = _as_dict(saved), _as_dict(current)
    return {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and k not in resumable}


class ResumeConfigError(ValueError):
    """Resuming a run with a config that changes what it computes (a user error: the message lists the changes)."""


def check_resume_config(run_dir: Path, current: Any, resumable: Collection[str] = ()) -> None:
    """Before resuming in ``run_dir``: refuse a config that changes what the saved run computes (nothing to check
    when the directory has no config.json yet).

    Raises:
        ResumeConfigError: (a ValueError) listing each changed key as ``key: saved -> current``.
    """
    if not (Path(run_dir) / CONFIG_FILE).is_file():
        return
    _, saved = load_config(run_dir, type(current))
    changes = config_changes(saved, current, resumable)
    if changes:
        listed = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items())
        raise ResumeConfigError(
            f"--resume with a different config than the run in {run_dir}: {listed}. Resume with the run's settings, "
            "or train with the new ones in another --output-dir."
        )
