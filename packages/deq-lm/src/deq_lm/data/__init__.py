"""Data for deq-lm tasks: the copy-memory generator (word-level corpora come with the language-modeling task)."""

from .copy_memory import (
    COPY_LEN,
    MARKER,
    N_SYMBOLS,
    copy_memory_batch,
    copy_memory_metrics,
    copy_memory_split,
    step_generator,
)

__all__ = [
    "COPY_LEN",
    "MARKER",
    "N_SYMBOLS",
    "copy_memory_batch",
    "copy_memory_metrics",
    "copy_memory_split",
    "step_generator",
]
