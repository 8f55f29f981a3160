"""The random generators (Python, NumPy when installed, torch) as tensors and plain data: :func:`rng_state` and
:func:`set_rng_state` (one file per process in a checkpoint)."""

from __future__ import annotations

import contextlib
import random
from typing import Any

__all__ = ["rng_state", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's (when installed) and torch's generators (CPU, and CUDA when available) as
    tensors and plain data, for :meth:`CheckpointWriter.save_torch` (one file per process)."""
    import torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    with contextlib.suppress(ImportError):
        import numpy as np

        kind, key, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [kind, torch.from_numpy(key.astype("int64")), int(pos), int(has_gauss), float(cached)]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, key, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, key.numpy().astype("uint32"), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
