"""Time training (and inference) steps of several models in one process, interleaved, so their ratios survive a busy
machine.

A timed step is what one step of ``deq_lm.train`` computes for one micro-batch: forward with targets after the
memory of a previous segment, loss = mean token NLL (+ weight x the Jacobian term when the entry applies it),
backward, in training mode (dropout on; a DEQ at its preset's forward limit, the top of the jitter range). The
optimizer step is left out (a few milliseconds for these sizes, the same for every model). Each round times every
entry once; one warm-up round is dropped. Both wall-clock and this process's CPU seconds are kept: on a shared
machine the CPU time is what the step costs on a free thread.

A timed inference step (:func:`time_inference_steps`) is what the evaluation computes for one segment: forward with
targets after the memory of a previous segment, in eval mode without gradients (a DEQ at its evaluation limit and
tolerance).

A regularized DEQ whose term is drawn with probability p costs, in expectation, p x (step with the term) +
(1 - p) x (step without it): :func:`expected_seconds` combines the two entries.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

import deq_core
from deq_lm.configs import Config
from deq_lm.models import SequenceModel


@dataclass
class TimedEntry:
    """One timed model. ``jacobian``: the Jacobian term is computed and backpropagated on every timed step."""

    label: str
    cfg: Config
    model: SequenceModel
    jacobian: bool = False
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    nfe: list[tuple[int, int | None]] = field(default_factory=list)

    def median_wall(self) -> float:
        return float(statistics.median(self.wall))

    def median_cpu(self) -> float:
        return float(statistics.median(self.cpu))


def _step(entry: TimedEntry, x: Tensor, y: Tensor, state: Any) -> Callable[[], tuple[int, int | None] | None]:
    """The timed computation of one training step of ``entry`` on (x, y) after ``state``."""
    plan = deq_core.Plan(jacobian_loss=entry.jacobian)  # the layer's own limit: the preset's deq.max_iter

    def run() -> tuple[int, int | None] | None:
        entry.model.zero_grad(set_to_none=True)
        with deq_core.use_plan(entry.model, plan):
            out = entry.model(x, state, targets=y)
        assert out.nll is not None
        loss = out.nll.mean()
        if entry.jacobian and out.info is not None and out.info.jacobian_loss is not None:
            loss = loss + entry.cfg.deq.jac_weight * out.info.jacobian_loss
        loss.backward()
        return None if out.info is None else (out.info.nfe, out.info.nfe_backward)

    return run


def _inference_step(entry: TimedEntry, x: Tensor, y: Tensor, state: Any) -> Callable[[], tuple[int, None] | None]:
    """The timed computation of one inference step of ``entry`` on (x, y) after ``state`` (eval mode, no grad)."""

    def run() -> tuple[int, None] | None:
        with torch.no_grad():
            out = entry.model(x, state, targets=y)
        return None if out.info is None else (out.info.nfe, None)

    return run


def _previous_state(model: SequenceModel, x: Tensor) -> Any:
    """The memory after segment ``x`` (no grad, in the model's current mode)."""
    with torch.no_grad():
        return model(x).state


def time_training_steps(
    entries: Sequence[TimedEntry], first: tuple[Tensor, Tensor], second: tuple[Tensor, Tensor], repeats: int
) -> None:
    """Time ``repeats`` interleaved rounds of one training step of every entry on segment ``second`` after the
    memory of segment ``first`` (each (B, L) inputs and targets); results in the entries' ``wall``, ``cpu``,
    ``nfe`` lists."""
    _time_rounds(entries, first, second, repeats, training=True)


def time_inference_steps(
    entries: Sequence[TimedEntry], first: tuple[Tensor, Tensor], second: tuple[Tensor, Tensor], repeats: int
) -> None:
    """As :func:`time_training_steps`, for one inference step (eval mode, no gradients; ``nfe`` holds (forward
    NFE, None))."""
    _time_rounds(entries, first, second, repeats, training=False)


def _time_rounds(
    entries: Sequence[TimedEntry],
    first: tuple[Tensor, Tensor],
    second: tuple[Tensor, Tensor],
    repeats: int,
    training: bool,
) -> None:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    make = _step if training else _inference_step
    steps = []
    for e in entries:
        e.model.train(training)
        steps.append(make(e, second[0], second[1], _previous_state(e.model, first[0])))
    for round_index in range(repeats + 1):
        for entry, step in zip(entries, steps):
            entry.model.train(training)
            wall, cpu = time.perf_counter(), time.process_time()
            nfe = step()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if round_index == 0:
                continue  # warm-up
            entry.wall.append(wall)
            entry.cpu.append(cpu)
            if nfe is not None:
                entry.nfe.append(nfe)


def expected_seconds(with_term: float, without_term: float, probability: float) -> float:
    """Expected step time of a DEQ whose Jacobian term is applied with ``probability``."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {probability}.")
    return probability * with_term + (1.0 - probability) * without_term
