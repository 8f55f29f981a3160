"""Run directories: the config file, checkpoint folders (Accelerate state) and the step counter saved with them.

Nothing here is specific to vision: the config is any dataclass with ``to_dict()`` (or plain fields), so these helpers
can move to a shared place together with deq-lm's.

Layout of OUTPUT_DIR::

    config.json                 {"name": preset name, "config": the resolved config}
    metrics.jsonl               one JSON object per log line (deq_core.experiment.MetricsLog)
    checkpoints/step_0000100/   accelerator.save_state(...): model.safetensors, optimizer, RNG states,
                                custom_checkpoint_*.pkl (objects registered with register_for_checkpointing)
    training.png                curves drawn at the end
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


class TrainState:
    """What Accelerate does not save by itself: the number of optimizer steps taken. Register it with
    ``accelerator.register_for_checkpointing(state)``; it is saved and restored with the checkpoint."""

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
    """Checkpoint folders of a run, oldest first."""
    folder = Path(output_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step_"))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def prune_checkpoints(output_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` (>= 1) checkpoints."""
    for old in list_checkpoints(output_dir)[: -max(keep, 1)]:
        shutil.rmtree(old, ignore_errors=True)


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
    """(preset name, config) saved in ``run_dir/config.json``; keys the class no longer has are dropped, and JSON
    lists become tuples where the field default is a tuple.

    Raises:
        FileNotFoundError: no config.json (not a run directory).
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a training run?")
    data = json.loads(path.read_text())
    fields = {f.name: f for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    values = {}
    for key, value in data["config"].items():
        if key in fields:
            values[key] = tuple(value) if isinstance(value, list) else value
    return data.get("name", "?"), config_cls(**values)


def config_changes(saved: Any, current: Any, resumable: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{key: (saved, current)} for settings that differ, except those listed in ``resumable`` (settings that may
    change when a run is resumed because they do not change what is computed)."""
    a, b = _as_dict(saved), _as_dict(current)
    return {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and k not in resumable}


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
