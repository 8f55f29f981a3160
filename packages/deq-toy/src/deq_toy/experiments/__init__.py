"""Experiments: the data, model, loss and evaluation of each of deq-toy's two studies (synthetic 1D, nested
arithmetic), see :class:`base.Experiment`. The training skeleton runs one through :class:`deq_toy.loop.ToyTask`."""

from __future__ import annotations

from pathlib import Path

from ..configs import ArithmeticConfig, Config
from .arithmetic import ArithmeticExperiment
from .base import Experiment, step_budget
from .synthetic import SyntheticExperiment


def build_experiment(config: Config, data_dir: Path) -> Experiment:
    """The experiment of ``config`` (data read from / generated into ``data_dir`` for arithmetic)."""
    if isinstance(config, ArithmeticConfig):
        return ArithmeticExperiment(config, data_dir)
    return SyntheticExperiment(config)


__all__ = ["ArithmeticExperiment", "Experiment", "SyntheticExperiment", "build_experiment", "step_budget"]
