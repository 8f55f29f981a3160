"""Tasks: data, model, loss and evaluation of each experiment (see :class:`base.ToyTask`)."""

from __future__ import annotations

from pathlib import Path

from ..configs import ArithmeticConfig, Config
from .arithmetic import ArithmeticTask
from .base import ToyTask, step_budget
from .synthetic import SyntheticTask


def build_task(config: Config, data_dir: Path) -> ToyTask:
    """The task of ``config`` (data read from / generated into ``data_dir`` for arithmetic)."""
    if isinstance(config, ArithmeticConfig):
        return ArithmeticTask(config, data_dir)
    return SyntheticTask(config)


__all__ = ["ArithmeticTask", "SyntheticTask", "ToyTask", "build_task", "step_budget"]
