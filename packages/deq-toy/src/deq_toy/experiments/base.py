"""What both toy experiments share (:class:`Experiment`), their step budget and their deterministic batches."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from deq_core import DEQ, DEQInfo, use_plan
from deq_core.train import Forward
from deq_core.train.trainer import schedule_at


class Experiment:
    """What both toy experiments share: the run's step budget (:func:`step_budget`), deterministic batches, and
    :meth:`train_step` (the skeleton's step schedule + forward + the scheduled Jacobian term) for training without the
    skeleton. A subclass sets
    ``config``, ``model``, ``steps_per_epoch``, ``total_steps``, ``eval_every`` and implements :meth:`batch`,
    :meth:`forward`, :meth:`evaluate`, :meth:`baseline` and :meth:`finish`; the training
    skeleton runs it through :class:`deq_toy.loop.ToyTask`."""

    config: Any
    model: nn.Module

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        """The training batch of ``step`` (0-based), a function of (seed, step) only."""
        raise NotImplementedError

    def forward(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> Forward:
        """Forward pass in train mode: the experiment's loss (without the Jacobian term), statistics, the DEQ info.
        What the DEQ layer does in the step (unroll, limit, Jacobian term) is its plan, set from outside
        (:func:`deq_core.use_plan`)."""
        raise NotImplementedError

    def train_step(self, batch: tuple[Tensor, Tensor], step: int) -> tuple[Tensor, dict[str, float], DEQInfo | None]:
        """(loss to backpropagate, with the Jacobian term when scheduled at ``step``; statistics; DEQ info): the step
        as the training skeleton takes it, the model's DEQ layer following the step's schedule of the config's ``deq``
        section (:func:`deq_core.train.trainer.schedule_at`: pretraining unroll, jittered limit, Jacobian term)."""
        schedule = schedule_at(self.config, step, any(isinstance(m, DEQ) for m in self.model.modules()))
        with use_plan(self.model, schedule.deq):
            out = self.forward(self.model, batch)
        loss = out.loss
        if schedule.jacobian and out.info is not None and out.info.jacobian_loss is not None:
            loss = loss + schedule.jacobian_weight * out.info.jacobian_loss
        return loss, out.stats, out.info


def step_budget(n_train: int, batch_size: int, epochs: int, max_steps: int = 0) -> tuple[int, int]:
    """(steps per epoch, total steps) of a run: ``epochs`` passes over ``n_train`` rows in batches of
    ``batch_size`` (the last partial batch dropped), cut at ``max_steps`` when > 0."""
    per_epoch = max(n_train // batch_size, 1)
    total = epochs * per_epoch
    return per_epoch, min(total, max_steps) if max_steps > 0 else total


def epoch_batch_indices(n: int, batch_size: int, step: int, seed: int) -> Tensor:
    """Indices of the batch of ``step``: epoch e = step // (n // batch_size) uses a permutation seeded by (seed, e)
    and the batches are its consecutive slices (the last partial batch is dropped)."""
    per_epoch = max(n // batch_size, 1)
    epoch, index = divmod(step, per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=gen)
    return perm[index * batch_size : (index + 1) * batch_size]
