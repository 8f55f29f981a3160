"""The ``optim`` and ``run`` sections both task configs share: deq-core's
:class:`~deq_core.train.sections.OptimConfig` with the number of epochs (:class:`ToyOptimConfig`) and
:class:`~deq_core.train.sections.RunConfig` with the number of torch threads (:class:`ToyRunConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from deq_core.train import OptimConfig, RunConfig, check_at_least, in_section


@dataclass(frozen=True)
class ToyOptimConfig(OptimConfig):
    """A toy config's ``optim`` section: Adam at ``lr`` (with ``weight_decay``) on a cosine schedule over ``epochs``
    passes of ``n_train`` rows in batches of ``batch_size`` (the last partial batch dropped), gradient-norm clipping
    at ``grad_clip`` (0: off); ``grad_accum`` micro-batches per step."""

    epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("optim"):
            check_at_least(self, 1, "epochs")


@dataclass(frozen=True)
class ToyRunConfig(RunConfig):
    """A toy config's ``run`` section: deq-core's (seed, mixed precision, logging, evaluation and checkpoint periods)
    plus ``threads``, torch's intra-op threads. ``eval_every`` = 0 evaluates once per epoch (and at the last step)."""

    threads: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        with in_section("run"):
            check_at_least(self, 1, "threads")
