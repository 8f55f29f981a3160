"""The sections every task config shares besides ``deq``: :class:`RunConfig` (``run``: seed, precision, logging and
checkpoint periods) and :class:`OptimConfig` (``optim``: batch, accumulation, learning rate, weight decay, clipping;
a task package subclasses it for its schedule) and the field helper :func:`section`. The training skeleton
(:func:`deq_core.train.trainer.train`) reads a config's ``run``, ``optim`` and ``deq`` sections directly: each
setting has one home and one default, here or in :class:`~deq_core.train.deq_config.DEQConfig`.

A task config is a frozen dataclass of sections: ``data``, ``model``, ``deq``, ``optim``, ``run``. A setting's name is
its dotted path (``optim.lr=3e-4`` on the command line); a name found in one section only may be given without it
(``lr=3e-4``), see :func:`~deq_core.train.run_config.resolve_key`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .checks import check_at_least, check_choice, check_finite, check_seed, in_section
from .trackers import check_project, check_tracker_names

__all__ = ["MAX_DIST_TIMEOUT", "OptimConfig", "RunConfig", "section"]

S = TypeVar("S")

MAX_DIST_TIMEOUT = 7 * 24 * 3600
"""The longest ``run.dist_timeout``, in seconds: a week. A collective that waits longer waits on a process that is
gone; a timeout of 1e30 s overflowed the ``timedelta`` torch is given."""


@dataclass(frozen=True)
class RunConfig:
    """A task config's ``run`` section: how a run is carried out and recorded (nothing here changes the model or its
    optimization, except ``seed``).

    seed: the global seed (weights, data order, dropout, Jacobian draws), an int from 0 to 2**32 - 1 (NumPy's limit).
    mixed_precision: "no", "fp16" or "bf16" (Accelerate), or None (unset, the default): the launcher's choice
    (``accelerate launch --mixed_precision``, ``accelerate config``), else "no"; a value set here wins over the
    launcher's. log_every: optimizer steps between metrics lines.
    eval_every: steps between evaluations (0: the task's ``eval_period``, e.g. once per epoch, else only at the last
    step; always also at the last step).
    save_every: steps between checkpoints (0: only at the end); keep_checkpoints: how many to keep. stop_after: stop
    with a checkpoint after this step as if interrupted (0: never; for resume tests). save_grads_at: write the
    synchronized gradients of this step to OUTPUT_DIR (0: never; for tests).
    log_with: experiment trackers that get every metrics line and the config (Accelerate's ``log_with``:
    tensorboard, wandb, mlflow, aim, comet_ml, ...; ``run.log_with=tensorboard,wandb``), writing under
    OUTPUT_DIR/trackers/; project: the trackers' project name (None: the preset's name).
    dist_timeout: seconds a collective operation of several processes waits for the others before the run stops with
    a line naming the ranks that did not answer (torch's default would be 30 minutes); at most a week.
    """

    seed: int = 0
    mixed_precision: Literal["no", "fp16", "bf16"] | None = None
    log_every: int = 10
    eval_every: int = 100
    save_every: int = 0
    keep_checkpoints: int = 2
    stop_after: int = 0
    save_grads_at: int = 0
    log_with: tuple[str, ...] = ()
    project: str | None = None
    dist_timeout: float = 600.0

    def __post_init__(self) -> None:
        with in_section("run"):
            _check_run(self)


@dataclass(frozen=True)
class OptimConfig:
    """The settings of a task config's ``optim`` section that every task has; a task package subclasses it with its
    schedule (steps or epochs, warmup, decay, optimizer name).

    batch_size: rows per optimizer step over all processes and micro-batches. grad_accum: micro-batches per step.
    lr: the peak learning rate. weight_decay: decoupled or L2 weight decay, as the task's optimizer applies it.
    grad_clip: maximum global gradient norm (0: off; inf is refused rather than read as "no clipping", which 0 says).
    Every float setting, here and in a task's subclass, must be a finite number
    (:func:`~deq_core.train.checks.check_finite`).
    """

    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 0.0

    def __post_init__(self) -> None:
        with in_section("optim"):
            _check_optim(self)


def _check_run(config: RunConfig) -> None:
    check_finite(config)
    check_choice(config, "mixed_precision")
    check_seed(config, "seed")
    check_at_least(config, 1, "log_every", "keep_checkpoints")
    check_at_least(config, 0, "eval_every", "save_every", "stop_after", "save_grads_at")
    check_tracker_names(config.log_with)
    check_project(config.project)
    timeout = config.dist_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"dist_timeout must be a number of seconds > 0, got {timeout!r}.")
    if timeout > MAX_DIST_TIMEOUT:
        raise ValueError(f"dist_timeout must be at most {MAX_DIST_TIMEOUT} seconds (a week), got {timeout!r}.")


def _check_optim(config: OptimConfig) -> None:
    check_finite(config)
    check_at_least(config, 1, "batch_size", "grad_accum")
    check_at_least(config, 0, "weight_decay", "grad_clip")
    if isinstance(config.lr, bool) or not isinstance(config.lr, (int, float)) or config.lr <= 0:
        raise ValueError(f"lr must be > 0, got {config.lr!r}.")
    if config.batch_size % config.grad_accum:
        raise ValueError(f"batch_size ({config.batch_size}) must be divisible by grad_accum ({config.grad_accum}).")


def section(cls: type[S], **defaults: Any) -> Any:
    """A dataclass field holding the section ``cls(**defaults)`` (a task's own defaults for a shared section), e.g.
    ``run: RunConfig = section(RunConfig, eval_every=200)``."""
    return dataclasses.field(default_factory=lambda: cls(**defaults))
