"""Learning-rate schedule of deq-lm training (the per-step forward limit is
deq_core.train.schedules.jittered_max_iter)."""

from __future__ import annotations

import math


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the base LR at ``step`` (0-based): linear warmup over ``warmup`` steps, then cosine decay from 1
    to ``min_ratio`` at ``total`` steps."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
