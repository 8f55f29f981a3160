"""deq-lm's checkpoint folder (``OUTPUT_DIR/checkpoints/step_N/``), written aside and renamed when complete by
:func:`deq_core.train.state.save_training_checkpoint`; tensors and plain data only:

    model.safetensors          the model's weights (tied weights stored once)
    optimizer.pt, scheduler.pt state dicts (torch.save, read with weights_only=True); scaler.pt with fp16
    train_state.json           {"step": optimizer steps taken, "processes": number of processes}
    rng_rankR.pt               each process's Python / NumPy / torch random states
    memory_rankR.pt            each process's memory carried to the next segment (None for independent sequences)
    checkpoint.json            the manifest, written last
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelerate import Accelerator
from accelerate.utils import send_to_device
from safetensors.torch import load_model, save_model
from torch import nn

from deq_core.train.state import TrainState as _StepState
from deq_core.train.state import load_training_checkpoint, save_training_checkpoint


class TrainState(_StepState):
    """The step reached and the memory carried to the next segment (None for tasks whose sequences are
    independent). Each process carries its own memory (its own batch rows) and saves it in its own file."""

    def __init__(self) -> None:
        super().__init__()
        self.memory: Any = None


def _objects(accelerator: Accelerator, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    objects = {"optimizer": optimizer, "scheduler": scheduler}
    if accelerator.scaler is not None:
        objects["scaler"] = accelerator.scaler
    return objects


def save_checkpoint(
    output_dir: Path, accelerator: Accelerator, model: nn.Module, optimizer: Any, scheduler: Any, state: TrainState
) -> None:
    """Write checkpoint ``state.step`` of the run (every process calls it; ``model`` is the unwrapped model)."""
    save_training_checkpoint(
        output_dir, state, _objects(accelerator, optimizer, scheduler), rank=accelerator.process_index,
        processes=accelerator.num_processes, barrier=accelerator.wait_for_everyone,
        write_weights=lambda path: save_model(model, str(path)), per_process={"memory": state.memory},
    )  # fmt: skip


def load_checkpoint(
    folder: Path, accelerator: Accelerator, model: nn.Module, optimizer: Any, scheduler: Any, state: TrainState
) -> None:
    """Restore what :func:`save_checkpoint` wrote into ``folder`` (a complete checkpoint).

    Raises:
        CheckpointError: a file is missing or is not tensors and plain data, or the checkpoint was written by
            another number of processes.
    """
    extra = load_training_checkpoint(
        folder, state, _objects(accelerator, optimizer, scheduler), rank=accelerator.process_index,
        processes=accelerator.num_processes, read_weights=lambda path: load_model(model, str(path)),
        per_process=["memory"],
    )  # fmt: skip
    state.memory = send_to_device(extra["memory"], accelerator.device)
