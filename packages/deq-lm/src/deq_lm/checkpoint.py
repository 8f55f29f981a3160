"""The training state deq-lm saves with a checkpoint: deq_core.runs.TrainState (the step) plus the memory carried to
the next segment, one file per process (``OUTPUT_DIR/checkpoints/step_N/memory_rankR.pt``).

The run directory itself (config.json, checkpoint folders) is handled by :mod:`deq_core.runs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from deq_core.runs import TrainState as _StepState


class TrainState(_StepState):
    """The step reached (``state_dict``, registered with ``accelerator.register_for_checkpointing``, saved by the main
    process) and the memory carried to the next segment (None for tasks whose sequences are independent). Each
    process carries its own memory (its own batch rows), so each saves it in its own file with :meth:`save_memory`."""

    def __init__(self) -> None:
        super().__init__()
        self.memory: Any = None

    def save_memory(self, folder: Path, rank: int) -> None:
        torch.save(self.memory, Path(folder) / f"memory_rank{rank}.pt")

    def load_memory(self, folder: Path, rank: int) -> None:
        path = Path(folder) / f"memory_rank{rank}.pt"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: was the checkpoint written with a different number of processes?"
            )
        self.memory = torch.load(path, weights_only=False)
