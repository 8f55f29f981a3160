"""What the training skeleton (:mod:`deq_core.train.trainer`) needs from a task, and what it hands to it.

A task supplies data, model, loss and evaluation by subclassing :class:`Task`; the skeleton owns devices and
processes, mixed precision, the DEQ step (:class:`StepSchedule`: pretraining unroll, jittered iteration limit, Jacobian
regularization), logging, progress, checkpoints, resume and plots. Its settings are the task config's sections,
read where they are used: ``run`` (:class:`~deq_core.train.sections.RunConfig`), ``optim``
(:class:`~deq_core.train.sections.OptimConfig`) and ``deq`` (:class:`~deq_core.train.deq_config.DEQConfig`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .. import Plan

__all__ = ["Forward", "Parts", "StepSchedule", "Task"]


@dataclasses.dataclass(frozen=True)
class StepSchedule:
    """What the training schedules (pretraining, jittered limit, Jacobian term) give one micro-batch of one optimizer
    step (a function of (seed, step) only, so that a resumed run does what an uninterrupted one would), built by
    :func:`~deq_core.train.trainer.schedule_at` from the config's ``deq`` section. The DEQ layers' part of it is one
    :class:`deq_core.Plan` (``deq``); the rest is the skeleton's.

    step: 0-based index of the optimizer step; micro / micro_batches: this micro-batch's index and their number.
    deq: what every DEQ layer of the model does in this step (:class:`deq_core.Plan`: pretraining unroll, jittered
    forward limit, Jacobian term); the skeleton hands it to the layers itself (:func:`deq_core.use_plan`) around
    :meth:`Task.forward`, so a model's forward takes none of it. jacobian_weight: the weight the skeleton gives
    ``info.jacobian_loss`` in the loss when ``deq.jacobian_loss`` is set.
    """

    step: int
    micro: int = 0
    micro_batches: int = 1
    deq: Plan = Plan()
    jacobian_weight: float = 0.0

    @property
    def mode(self) -> str:
        """ "unrolled" (pretraining) or "solve"."""
        return "unrolled" if self.deq.unroll else "solve"

    @property
    def jacobian(self) -> bool:
        """Whether the Jacobian term is computed and added in this step."""
        return self.deq.jacobian_loss


@dataclasses.dataclass
class Forward:
    """A task's forward pass on one micro-batch: ``loss`` (scalar, the task's loss without the Jacobian term),
    ``stats`` (floats for metrics.jsonl, at least the task's metric) and the DEQ's ``info`` (None without a DEQ;
    its statistics are logged by the skeleton after the backward pass)."""

    loss: Tensor
    stats: dict[str, float]
    info: Any = None


@dataclasses.dataclass
class Parts:
    """What :meth:`Task.build` returns: the model, its optimizer and LR scheduler (a torch ``LRScheduler``, stepped
    once per optimizer step, or a timm scheduler, stepped with the number of steps done)."""

    model: nn.Module
    optimizer: Any
    scheduler: Any


class Task:
    """What a task package supplies to the training skeleton (deq-lm's ``SequenceTask``, deq-toy's ``ToyTask``,
    deq-vision's ``VisionTask``): subclass it and implement the methods that raise NotImplementedError.

    Attributes: ``metric`` (the key of the task's main metric in the evaluation results and the train stats),
    ``eval_splits`` (evaluated every ``run.eval_every`` steps and at the end), ``final_splits`` (evaluated once at the
    end), ``throughput`` ((unit, items per optimizer step), e.g. ("tokens", B * L), or None),
    ``steps`` (optimizer steps in all when the task computes them, e.g. from epochs; 0: the config's ``optim.steps``),
    ``eval_period`` (steps between evaluations when ``run.eval_every`` is 0, e.g. one epoch; 0: at the last step
    only), ``resumable`` (the dotted names of the config's settings that may change on resume: they change nothing
    computed), ``find_unused_parameters`` (tell DistributedDataParallel that some parameters may get no gradient in a
    step, e.g. a network computing a DEQ's initial guess without gradients; costs a graph traversal per step)."""

    metric: str = "acc"
    eval_splits: tuple[str, ...] = ("valid",)
    final_splits: tuple[str, ...] = ()
    throughput: tuple[str, int] | None = None
    steps: int = 0
    eval_period: int = 0
    resumable: frozenset[str] = frozenset()
    find_unused_parameters: bool = False

    def build(self, accelerator: Any) -> Parts:
        """Data, model, optimizer and scheduler, built after the global seed is set (every process calls it)."""
        raise NotImplementedError

    def train_batches(self, start: int, accelerator: Any) -> Iterator[Any]:
        """This process's training batches from step ``start`` on (0-based), one per optimizer step: a tuple of
        tensors with the batch dimension first (split into micro-batches by the skeleton). A resumed run must get
        the batches an uninterrupted one would."""
        raise NotImplementedError

    def forward(self, model: nn.Module, batch: Any, schedule: StepSchedule) -> Forward:
        """Forward pass of one micro-batch in train mode (``model`` may be wrapped by DistributedDataParallel). Its
        DEQ layers already follow ``schedule.deq``."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, split: str, accelerator: Any) -> dict[str, float]:
        """Results on ``split``: at least ``loss`` and the metric (DEQs: ``nfe_forward``, ``residual``). Called on
        every process with the unwrapped model in eval mode, without gradients; returns the same on every process."""
        raise NotImplementedError

    def describe(self) -> str:
        """The data in a few words, for the first console line."""
        raise NotImplementedError

    def baseline(self) -> str:
        """The chance-level result of the metric, for the final line (e.g. "acc 10 % (uniform guess)")."""
        raise NotImplementedError

    def config_extra(self) -> dict[str, Any]:
        """Top-level entries of OUTPUT_DIR/config.json besides the config (e.g. ``{"data_dir": ...}``)."""
        return {}

    def warnings(self) -> list[str]:
        """Warnings about the data, printed once at the start."""
        return []

    def weights_metadata(self) -> dict[str, str]:
        """Text entries of the safetensors header of every checkpoint's ``model.safetensors`` (e.g. the settings a
        loader needs to rebuild the model those weights belong to); read with ``safetensors.safe_open(path,
        "pt").metadata()``. Give at most one entry: safetensors writes several in a random order, and the same
        weights would no longer give the same file."""
        return {}

    def after_step(self, model: nn.Module, steps_done: int) -> None:
        """Called after each optimizer step with the unwrapped model (e.g. to update a weight average)."""

    def checkpoint_objects(self) -> dict[str, Any]:
        """Objects with ``state_dict`` / ``load_state_dict`` saved in checkpoints besides optimizer and scheduler."""
        return {}

    def process_state(self) -> dict[str, Any]:
        """This process's state to checkpoint (tensors and plain data, e.g. a recurrent memory), by name."""
        return {}

    def load_process_state(self, state: Mapping[str, Any], device: Any) -> None:
        """Restore what :meth:`process_state` returned (moved to ``device`` by the task)."""

    def finish(self, output_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Task outputs at the end of the run (main process only), e.g. extra tables and figures; returns results
        for the summary (under "results")."""
        return {}
