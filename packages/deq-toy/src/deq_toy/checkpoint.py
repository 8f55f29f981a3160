"""Reading deq-toy's checkpoints (written by the training skeleton, :mod:`deq_core.train.trainer`): the run folder's
``config.json`` and ``checkpoints/step_N/`` with ``model.safetensors``, ``optimizer.pt``, ``scheduler.pt``,
``train_state.json``, ``rng_rankR.pt`` and the manifest ``checkpoint.json``; tensors and plain data only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from deq_core.train import UsageError
from deq_core.train.checkpoints import CONFIG_FILE, checkpoint_weights, load_checked, read_json, resolve_checkpoint
from deq_core.train.state import STATE_FILE


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The newest complete checkpoint of a run directory, or a checkpoint folder, as {"step", "config" (a dict),
    "model" (the state dict), "run_dir" (the run's folder), "weights_file" (the file "model" was read from)}, for
    evaluation.

    Raises:
        UsageError: no checkpoint there, or a file that is not tensors and plain data.
    """
    try:
        run_dir, folder = resolve_checkpoint(Path(path))
        state = read_json(folder / STATE_FILE)
        weights_file = checkpoint_weights(folder)
        weights = load_checked(weights_file, lambda p: load_file(str(p)))
        config = read_json(run_dir / CONFIG_FILE)["config"]
        return {"step": int(state["step"]), "config": config, "model": weights, "run_dir": run_dir,
                "weights_file": weights_file}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"no usable checkpoint at {path}: {err}") from None
