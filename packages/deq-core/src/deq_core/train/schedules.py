"""What changes from one training step to the next, deterministic per step so that a resumed run draws what an
uninterrupted one would:

- :class:`JacobianSchedule`: when to add the Jacobian regularizer and with which weight (probability p, weight gamma,
  gamma growing by a step every K steps).
- :class:`PretrainSchedule`: the unrolled (weight-tied) pretraining phase for the first N steps.
- :func:`jittered_max_iter`: a random forward iteration limit per step, deterministic per (seed, step).
- :func:`cosine_lr_factor`: the learning-rate factor of a linear warmup then cosine decay (for ``LambdaLR``).
"""

from __future__ import annotations

import dataclasses
import math
import random

__all__ = ["JacobianSchedule", "PretrainSchedule", "cosine_lr_factor", "jittered_max_iter"]


@dataclasses.dataclass(frozen=True)
class JacobianSchedule:
    """Jacobian regularization schedule (Bai, Koltun & Kolter 2021).

    Args:
        weight: gamma at step 0 (0 disables the regularizer).
        probability: on each step the loss is added with this probability.
        growth: added to the weight every ``every`` steps from step ``start`` (0: constant weight).
        every: period of the growth, in steps (0: never grows).
        start: the step the growth is counted from: the end of unrolled pretraining, as the reference code counts it
            (MDEQ: gamma + 0.1 ((step - pretrain_steps) // increment)).
        seed: seed of the per-step draws.
        stop: the regularizer is off (weight 0, never active) from this step on (None: never switched off).
    """

    weight: float = 0.0
    probability: float = 1.0
    growth: float = 0.0
    every: int = 0
    seed: int = 0
    stop: int | None = None
    start: int = 0

    def __post_init__(self) -> None:
        if self.weight < 0 or self.growth < 0:
            raise ValueError(f"Jacobian weight and growth must be >= 0, got {self.weight} and {self.growth}.")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"Jacobian probability must be in [0, 1], got {self.probability}.")
        if self.every < 0 or self.start < 0:
            raise ValueError(f"Jacobian growth period and start must be >= 0 steps, got {self.every}, {self.start}.")
        if self.stop is not None and self.stop < 0:
            raise ValueError(f"Jacobian stop step must be >= 0 (or None: never), got {self.stop}.")

    def weight_at(self, step: int) -> float:
        """gamma at ``step`` (0-based); 0 from ``stop`` on."""
        if self.stop is not None and step >= self.stop:
            return 0.0
        grown = self.growth * (max(step - self.start, 0) // self.every) if self.every > 0 else 0.0
        return self.weight + grown

    def active(self, step: int) -> bool:
        """Whether the regularizer is applied at ``step``: same answer for the same (seed, step), even after resume."""
        if self.weight_at(step) == 0.0 or self.probability == 0.0:
            return False
        if self.probability == 1.0:
            return True
        return random.Random(self.seed * 1_000_003 + step).random() < self.probability


@dataclasses.dataclass(frozen=True)
class PretrainSchedule:
    """Unrolled pretraining: for the first ``steps`` training steps, apply f ``depth`` times with ordinary backprop
    instead of solving (``DEQ(...)(f, z0, unroll=schedule.unroll_at(step))``)."""

    steps: int = 0
    depth: int = 2

    def __post_init__(self) -> None:
        if self.steps < 0 or self.depth < 1:
            raise ValueError(f"pretraining needs steps >= 0 and depth >= 1, got {self.steps} and {self.depth}.")

    def unroll_at(self, step: int) -> int | None:
        """The unroll depth at ``step``, or None once the DEQ solves for its fixed point."""
        return self.depth if step < self.steps else None


def jittered_max_iter(max_iter: int, jitter: int, seed: int, step: int) -> int:
    """The forward iteration limit of ``step``: uniform in [max_iter - jitter, max_iter], the same for the same
    (seed, step), so that a resumed run draws what an uninterrupted one would.

    Raises:
        ValueError: ``jitter`` < 0 or >= ``max_iter`` (the limit must stay >= 1).
    """
    if not 0 <= jitter < max_iter:
        raise ValueError(f"max_iter_jitter must be in [0, max_iter) = [0, {max_iter}), got {jitter}.")
    if jitter == 0:
        return max_iter
    return random.Random(seed * 7919 + step).randint(max_iter - jitter, max_iter)


def cosine_lr_factor(step: int, total: int, warmup: int = 0, min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based): linear warmup over ``warmup`` steps, then cosine
    decay from 1 to ``min_ratio`` at ``total`` steps (held there after). Use it as
    ``LambdaLR(optimizer, lambda s: cosine_lr_factor(s, total, warmup, min_ratio))``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
