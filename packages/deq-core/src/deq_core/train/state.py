"""A training run's checkpoint: :class:`TrainState` (the step counter and what a task adds),
:func:`save_training_checkpoint` / :func:`load_training_checkpoint` (weights, state dicts, step, random states,
per-process tensors), built on :mod:`deq_core.train.checkpoints`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from .checkpoints import (
    CONFIG_COPY_FILE,
    MANIFEST_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    atomic_checkpoint_dir,
    load_checked,
    load_states,
    read_json,
    safe_load,
    save_states,
)
from .rng import rng_state, set_rng_state

__all__ = ["CONFIG_COPY_FILE", "STATE_FILE", "TrainState", "load_training_checkpoint", "save_training_checkpoint"]

STATE_FILE = "train_state.json"


class TrainState:
    """What a training loop must save besides model, optimizer and schedule: the number of optimizer steps taken, and
    the number of metrics lines written by then with the SHA-256 digest of those lines (``MetricsLog.mark()``; a
    resumed run keeps those lines and no other, and only when they are the same, ``MetricsLog.resume_at``). Subclass
    it to carry more plain data (extend :meth:`state_dict` / :meth:`load_state_dict`); it is saved as JSON."""

    def __init__(self) -> None:
        self.step = 0
        self.metrics_lines = 0
        self.metrics_digest = ""

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "metrics_lines": self.metrics_lines, "metrics_digest": self.metrics_digest}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Raises KeyError when ``metrics_lines`` is missing (the file was modified: no line count, no resume)."""
        self.step = int(state["step"])
        self.metrics_lines = int(state["metrics_lines"])
        self.metrics_digest = str(state.get("metrics_digest", ""))  # "": a checkpoint of an earlier version


def save_training_checkpoint(
    output_dir: str | Path,
    state: TrainState,
    objects: dict[str, Any],
    *,
    rank: int = 0,
    processes: int = 1,
    barrier: Callable[[], None] | None = None,
    write_weights: Callable[[Path], None] | None = None,
    per_process: dict[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Write checkpoint ``state.step`` of a run, aside then renamed (:func:`atomic_checkpoint_dir`); every process
    calls it. Files: ``model.safetensors`` (``write_weights(path)``, main process), ``NAME.pt`` for each object's
    state dict (main process), ``train_state.json`` (``state.state_dict()`` and the number of processes),
    ``run_config.json`` (``config``: what the run's config.json holds, the copy a resume restores it from when it was
    deleted), and per process ``rng_rankR.pt`` (:func:`rng_state`) and ``NAME_rankR.pt`` for each entry of
    ``per_process`` (tensors and plain data)."""
    main = rank == 0
    with atomic_checkpoint_dir(output_dir, state.step, main, barrier) as ckpt:
        if main:
            if write_weights is not None:
                ckpt.save_with(WEIGHTS_FILE, write_weights)
            save_states(ckpt, objects)
            ckpt.save_json(STATE_FILE, {**state.state_dict(), "processes": processes})
            if config is not None:
                ckpt.save_json(CONFIG_COPY_FILE, dict(config))
        ckpt.save_torch(f"rng_rank{rank}.pt", rng_state())
        for name, value in (per_process or {}).items():
            ckpt.save_torch(f"{name}_rank{rank}.pt", value)


def load_training_checkpoint(
    folder: str | Path,
    state: TrainState,
    objects: dict[str, Any],
    *,
    rank: int = 0,
    processes: int = 1,
    read_weights: Callable[[Path], Any] | None = None,
    per_process: Collection[str] = (),
) -> dict[str, Any]:
    """Restore what :func:`save_training_checkpoint` wrote into ``folder``: weights (``read_weights(path)``), state
    dicts, ``state``, this process's random states (and check that the copy of config.json is JSON); returns this
    process's ``per_process`` entries by name.

    Raises:
        CheckpointError: a file is missing or holds something else than tensors and plain data, the checkpoint was
            written by another number of processes, or ``train_state.json`` names another step than the manifest
            (the file was modified).
    """
    folder = Path(folder)
    saved = read_json(folder / STATE_FILE)
    if not isinstance(saved, dict) or saved.get("processes") != processes:
        found = saved.get("processes") if isinstance(saved, dict) else "?"
        raise CheckpointError(
            f"{folder} was written by {found} process(es), this run has {processes}: resume with the same number."
        )
    step = read_json(folder / MANIFEST_FILE).get("step")
    if saved.get("step") != step:
        raise CheckpointError(
            f"{folder / STATE_FILE} says step {saved.get('step')!r}, but the checkpoint's {MANIFEST_FILE} says step "
            f"{step!r}: the file was modified; restore it, or delete {folder} to resume from the checkpoint before."
        )
    if read_weights is not None:
        load_checked(folder / WEIGHTS_FILE, read_weights)
    load_states(folder, objects)
    load_checked(folder / STATE_FILE, lambda _: state.load_state_dict(saved))
    extra = {name: safe_load(folder / f"{name}_rank{rank}.pt") for name in per_process}
    load_checked(folder / f"rng_rank{rank}.pt", lambda path: set_rng_state(safe_load(path)))
    if (folder / CONFIG_COPY_FILE).exists():  # read when config.json is lost: plain data, as every file here
        read_json(folder / CONFIG_COPY_FILE)
    return extra
