"""What the training skeleton (:mod:`deq_core.train.trainer`) needs from a task, and what it hands to it.

A task supplies data, model, loss and evaluation by subclassing :class:`Task`; the skeleton owns devices and
processes, mixed precision, the DEQ step (:class:`StepPlan`: pretraining unroll, jittered iteration limit, Jacobian
regularization), logging, progress, checkpoints, resume and plots. :class:`TrainSettings` holds the skeleton's knobs
(each task package builds them from its own config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .schedules import JacobianSchedule, PretrainSchedule

__all__ = ["Forward", "Parts", "StepPlan", "Task", "TrainSettings"]


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The training skeleton's settings.

    Args:
        name: the run's name (the preset), shown on the console and saved in config.json.
        config: the task's config (a dataclass, or an object with ``to_dict()``), saved in OUTPUT_DIR/config.json and
            compared on resume; ``resumable``: its fields that may change on resume (they change nothing computed);
            ``config_extra``: top-level entries of config.json besides it (e.g. ``{"data_dir": ...}``).
        steps: optimizer steps in all. seed: the global seed (set before :meth:`Task.build`).
        batch_size: rows per optimizer step over all processes; when > 0 it must be divisible by the number of
            processes times ``grad_accum`` (checked before anything is built).
        grad_accum: micro-batches per optimizer step (each process splits its batch rows into this many).
        grad_clip: max global gradient norm (0: off). mixed_precision: "no", "fp16" or "bf16" (Accelerate); None:
            the launcher's choice (``accelerate launch --mixed_precision``: ACCELERATE_MIXED_PRECISION), else "no".
        log_every, eval_every: steps between metrics lines / evaluations (also at the last step).
        save_every: steps between checkpoints (0: only at the end); keep_checkpoints: how many to keep.
        stop_after: stop with a checkpoint once this many steps are done in all (0: never), for a later resume.
        save_grads_at: write OUTPUT_DIR/grads_stepN.safetensors with the synchronized gradients of step N (0: never).
        is_deq: whether the model takes the DEQ step arguments (unroll, max_iter, jacobian_loss) of :class:`StepPlan`.
        max_iter, max_iter_jitter: the forward iteration limit, drawn per step in [max_iter - jitter, max_iter].
        pretrain: the unrolled pretraining phase. jacobian: the Jacobian-regularization schedule.
        progress: draw a progress bar (on the main process, when stderr is a terminal).
        find_unused_parameters: tell DistributedDataParallel that some parameters may get no gradient in a step
            (e.g. a network computing a DEQ's initial guess without gradients); costs a graph traversal per step.
        log_with: experiment trackers (Accelerate's ``log_with`` names) that get every metrics line and the config,
            writing under OUTPUT_DIR/trackers/; project: their project name (None: ``name``).
        dist_timeout: seconds a collective operation waits for the other processes (the process-group timeout).
    """

    name: str
    config: Any
    steps: int
    seed: int = 0
    resumable: frozenset[str] = frozenset()
    config_extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    batch_size: int = 0
    grad_accum: int = 1
    grad_clip: float = 0.0
    mixed_precision: str | None = None
    log_every: int = 10
    eval_every: int = 100
    save_every: int = 0
    keep_checkpoints: int = 1
    stop_after: int = 0
    save_grads_at: int = 0
    is_deq: bool = False
    max_iter: int = 1
    max_iter_jitter: int = 0
    pretrain: PretrainSchedule = PretrainSchedule()
    jacobian: JacobianSchedule = JacobianSchedule()
    progress: bool = True
    find_unused_parameters: bool = False
    log_with: tuple[str, ...] = ()
    project: str | None = None
    dist_timeout: float = 600.0

    def __post_init__(self) -> None:
        for key in ("steps", "grad_accum", "log_every", "eval_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}.")
        if not self.dist_timeout > 0 or self.dist_timeout == float("inf"):
            raise ValueError(f"dist_timeout must be a number of seconds > 0, got {self.dist_timeout}.")
        if self.save_every < 0 or self.stop_after < 0 or self.keep_checkpoints < 1:
            raise ValueError("save_every and stop_after must be >= 0 and keep_checkpoints >= 1.")


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """What the DEQ does on one micro-batch of one optimizer step (a function of (seed, step) only, so that a resumed
    run does what an uninterrupted one would).

    step: 0-based index of the optimizer step; micro / micro_batches: this micro-batch's index and their number.
    unroll: pretraining depth (apply f this many times with ordinary backprop), None once the DEQ solves.
    max_iter: this step's forward iteration limit (None for a model without a DEQ).
    jacobian: whether to compute ``info.jacobian_loss`` (the skeleton adds ``jacobian_weight`` times it to the loss).
    """

    step: int
    micro: int = 0
    micro_batches: int = 1
    unroll: int | None = None
    max_iter: int | None = None
    jacobian: bool = False
    jacobian_weight: float = 0.0

    @property
    def mode(self) -> str:
        """ "unrolled" (pretraining) or "solve"."""
        return "unrolled" if self.unroll else "solve"

    def deq_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of a DEQ model's forward: ``unroll``, ``max_iter``, ``jacobian_loss``."""
        return {"unroll": self.unroll, "max_iter": self.max_iter, "jacobian_loss": self.jacobian}


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
    """One experiment for the training skeleton: subclass it and implement the methods that raise
    NotImplementedError. Attributes: ``metric`` (the key of the task's main metric in the evaluation results and the
    train stats), ``eval_splits`` (evaluated every ``eval_every`` steps and at the end), ``final_splits`` (evaluated
    once at the end), ``throughput`` ((unit, items per optimizer step), e.g. ("tokens", B * L), or None)."""

    metric: str = "acc"
    eval_splits: tuple[str, ...] = ("valid",)
    final_splits: tuple[str, ...] = ()
    throughput: tuple[str, int] | None = None

    def build(self, accelerator: Any) -> Parts:
        """Data, model, optimizer and scheduler, built after the global seed is set (every process calls it)."""
        raise NotImplementedError

    def train_batches(self, start: int, accelerator: Any) -> Iterator[Any]:
        """This process's training batches from step ``start`` on (0-based), one per optimizer step: a tuple of
        tensors with the batch dimension first (split into micro-batches by the skeleton). A resumed run must get
        the batches an uninterrupted one would."""
        raise NotImplementedError

    def forward(self, model: nn.Module, batch: Any, plan: StepPlan) -> Forward:
        """Forward pass of one micro-batch in train mode (``model`` may be wrapped by DistributedDataParallel)."""
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

    def warnings(self) -> list[str]:
        """Warnings about the data, printed once at the start."""
        return []

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
