"""Run directories: the config file, checkpoint folders (Accelerate state) and the training state saved with them.

Layout of OUTPUT_DIR::

    config.json                 the resolved Config of the run
    metrics.jsonl               one JSON object per log line (deq_core.experiment.MetricsLog)
    checkpoints/step_0000100/   accelerator.save_state(...): model.safetensors, optimizer, RNG states,
                                custom_checkpoint_*.pkl (the LR scheduler and TrainState below)
    training.png                loss, NFE and residual over training
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from .configs.config import Config

CHECKPOINT_DIR = "checkpoints"
# Settings that may change when a run is resumed (they do not change what is computed).
RESUMABLE_CHANGES = frozenset(
    {"stop_after", "save_grads_at", "eval_every", "log_every", "save_every", "keep_checkpoints", "n_test"}
)


class TrainState:
    """The parts of a run Accelerate does not save by itself: the step reached (``state_dict``, registered with
    ``accelerator.register_for_checkpointing``, saved by the main process) and the memory carried to the next segment
    (None for tasks whose sequences are independent). Each process carries its own memory (its own batch rows), so
    each saves it in its own file with :meth:`save_memory`."""

    def __init__(self) -> None:
        self.step = 0
        self.memory: Any = None

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])

    def save_memory(self, folder: Path, rank: int) -> None:
        torch.save(self.memory, folder / f"memory_rank{rank}.pt")

    def load_memory(self, folder: Path, rank: int) -> None:
        path = folder / f"memory_rank{rank}.pt"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: was the checkpoint written with a different number of processes?"
            )
        self.memory = torch.load(path, weights_only=False)


def checkpoint_path(output_dir: Path, step: int) -> Path:
    return output_dir / CHECKPOINT_DIR / f"step_{step:07d}"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Checkpoint folders of a run, oldest first."""
    folder = output_dir / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step_"))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def prune_checkpoints(output_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints."""
    for old in list_checkpoints(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def save_config(cfg: Config, output_dir: Path, name: str) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.json").write_text(json.dumps({"name": name, "config": cfg.to_dict()}, indent=2) + "\n")


def load_config(run_dir: Path) -> tuple[str, Config]:
    """(preset name, Config) saved in ``run_dir/config.json``."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a deq_lm.train run?")
    data = json.loads(path.read_text())
    known = {f.name for f in dataclasses.fields(Config)}
    values = {k: v for k, v in data["config"].items() if k in known}
    return data.get("name", "?"), Config(**values)


def config_changes(saved: Config, current: Config) -> dict[str, tuple[Any, Any]]:
    """{key: (saved, current)} for settings that differ and may not change on resume."""
    a, b = saved.to_dict(), current.to_dict()
    return {k: (a[k], b[k]) for k in a if a[k] != b[k] and k not in RESUMABLE_CHANGES}


def resolve_checkpoint(path: Path) -> tuple[Path, Path]:
    """(run_dir, checkpoint_dir) from either a run directory (its latest checkpoint) or a checkpoint folder."""
    if (path / "config.json").is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no checkpoints under {path / CHECKPOINT_DIR}.")
        return path, latest
    run_dir = path.parent.parent
    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} is neither a run directory (with config.json) nor a checkpoint folder inside one "
            f"(RUN/{CHECKPOINT_DIR}/step_N)."
        )
    return run_dir, path
