"""Learning-rate schedule and the per-step random draws of DEQ training, deterministic in (seed, step)."""

from __future__ import annotations

import math
import random


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the base LR at ``step`` (0-based): linear warmup over ``warmup`` steps, then cosine decay from 1
    to ``min_ratio`` at ``total`` steps."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def jittered_max_iter(max_iter: int, jitter: int, seed: int, step: int) -> int:
    """The forward iteration limit of ``step``: uniform in [max_iter - jitter, max_iter], the same after a resume."""
    if jitter == 0:
        return max_iter
    return random.Random(seed * 7919 + step).randint(max_iter - jitter, max_iter)
