"""Tasks: what the generic training loop needs for each experiment (see :class:`base.Task`)."""

from __future__ import annotations

from pathlib import Path

from ..configs import ArithmeticConfig, Config
from .arithmetic import ArithmeticTask
from .base import Task
from .synthetic import SyntheticTask


def build_task(config: Config, data_dir: Path) -> Task:
    """The task of ``config`` (data read from / generated into ``data_dir`` for arithmetic)."""
    if isinstance(config, ArithmeticConfig):
        return ArithmeticTask(config, data_dir)
    return SyntheticTask(config)


__all__ = ["ArithmeticTask", "SyntheticTask", "Task", "build_task"]
