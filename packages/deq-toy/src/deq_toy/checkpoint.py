"""Checkpoints as plain state dicts (model, optimizer, scheduler), RNG states and the step; never pickled modules."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import UserError

CHECKPOINT_NAME = "checkpoint.pt"


def rng_state() -> dict[str, Any]:
    """The torch and Python RNG states (the only generators training draws from)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def save_checkpoint(
    path: str | Path,
    *,
    step: int,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> Path:
    """Write the training state after ``step`` optimizer steps to ``path`` atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": "deq-toy-checkpoint-1",
        "step": step,
        "config": config,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(),
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors and plain Python values only).

    Raises:
        UserError: the file is missing or is not a deq-toy checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; pass the output directory of a training run (or its checkpoint.pt).")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a truncated or foreign file
        raise UserError(f"{path} is not a readable deq-toy checkpoint ({type(err).__name__}: {err}).") from None
    if not isinstance(payload, dict) or payload.get("format") != "deq-toy-checkpoint-1":
        raise UserError(f"{path} is not a deq-toy checkpoint (no 'format': 'deq-toy-checkpoint-1' entry).")
    return payload
