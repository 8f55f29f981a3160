"""deq-toy's checkpoint folder ``OUTPUT_DIR/checkpoints/step_N/``, written aside and renamed when complete by
:func:`deq_core.train.state.save_training_checkpoint`; tensors and plain data only:

    model.pt, optimizer.pt, scheduler.pt   state dicts (torch.save, read with weights_only=True)
    train_state.json                       the step, the config, the running sums of the metrics line in progress
    rng_rank0.pt                           Python / NumPy / torch random states
    checkpoint.json                        the manifest, written last
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deq_core.train.checkpoints import prune_checkpoints, read_json, resolve_checkpoint, safe_load
from deq_core.train.errors import UsageError
from deq_core.train.state import TrainState, save_training_checkpoint


class ToyState(TrainState):
    """The step, the run's config (a dict) and the sums and count of the training metrics since the last log line
    (so that the first line after a resume averages the same steps as an uninterrupted run)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        self.sums: dict[str, float] = {}
        self.count = 0

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "config": self.config, "sums": self.sums, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.config = dict(state["config"])
        self.sums = {str(k): float(v) for k, v in state["sums"].items()}
        self.count = int(state["count"])


def save_checkpoint(output_dir: Path, state: ToyState, objects: dict[str, Any]) -> None:
    """Checkpoint ``state.step`` of the run: ``objects`` ({"model", "optimizer", "scheduler"}) and the state; only the
    newest checkpoint is kept."""
    save_training_checkpoint(output_dir, state, objects)
    prune_checkpoints(output_dir, keep=1)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The newest complete checkpoint of a run directory, or a checkpoint folder, as {"step", "config", "model"}
    (for evaluation; tensors and plain values only).

    Raises:
        UsageError: no checkpoint there, or a file that is not tensors and plain data.
    """
    try:
        _, folder = resolve_checkpoint(Path(path))
        state = read_json(folder / "train_state.json")
        return {"step": int(state["step"]), "config": state["config"], "model": safe_load(folder / "model.pt")}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"no usable checkpoint at {path}: {err}") from None
