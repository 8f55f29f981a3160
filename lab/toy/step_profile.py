"""Where one training step of an arithmetic model spends its time: the cell f (GRU over the sequence) inside the
forward solve, and everything else (backward solve or backpropagation through the unrolled cells, the Jacobian
term, the optimizer).

Used by the claims (:func:`lab.toy.claims.arithmetic.step_profile`) to say how long a full run takes on one thread
and why. Times are wall-clock seconds on the calling thread (``torch.get_num_threads()`` is reported): run it
with ``OMP_NUM_THREADS=1`` for the one-thread figure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from deq_toy.experiments.arithmetic import ArithmeticExperiment


@dataclass(frozen=True)
class StepProfile:
    """Medians over the timed steps (seconds), the step's NFE, and the full run's estimated training time.

    step_s: one optimizer step (forward, loss, backward, Adam). forward_s: the model's forward call.
    f_calls_forward: calls of the cell in the forward pass (the forward solve, or the repeats); f_s: one call of
    the cell at the training batch. nfe_backward: the backward solve's NFE (0 for models without one).
    run_minutes: total_steps x step_s / 60 (evaluations excluded). threads: torch's intra-op threads.
    """

    step_s: float
    forward_s: float
    f_s: float
    f_calls_forward: float
    nfe_backward: float
    total_steps: int
    run_minutes: float
    threads: int

    def summary(self) -> str:
        """One sentence: the step, its parts and the run's estimated training time."""
        f_share = self.f_calls_forward * self.f_s
        return (
            f"{self.step_s:.3f} s per step ({self.threads} thread(s)): forward {self.forward_s:.3f} s "
            f"({self.f_calls_forward:.1f} calls of f at {1e3 * self.f_s:.1f} ms = {f_share:.3f} s), backward and "
            f"optimizer {self.step_s - self.forward_s:.3f} s ({self.nfe_backward:.1f} backward NFE); "
            f"{self.total_steps} steps: {self.run_minutes:.1f} min of training"
        )


class _CallTimer:
    """Counts and times the calls of a module's forward (through a forward pre-hook and hook)."""

    def __init__(self, module: nn.Module) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._start = 0.0
        self._handles = [
            module.register_forward_pre_hook(self._before),
            module.register_forward_hook(self._after),
        ]

    def _before(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def _after(self, *_: Any) -> None:
        self.calls += 1
        self.seconds += time.perf_counter() - self._start

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile_steps(experiment: ArithmeticExperiment, steps: int = 10, first_step: int = 0) -> StepProfile:
    """Time ``steps`` training steps of ``experiment.model`` (in train mode, Adam at the config's optim.lr, the config's
    Jacobian schedule) on the batches of steps first_step, first_step + 1, ...; the model's weights change (use a
    copy of a trained experiment). Models: every arithmetic model; the cell of the GRU-DEQ and repeated GRU is
    ``model.cell``, the other models have no cell (f_s = 0)."""
    model = experiment.model
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=experiment.config.optim.lr)
    cell = getattr(model, "cell", None)
    step_times, forward_times, calls, nfe_backward = [], [], [], []
    for k in range(steps):
        batch = experiment.batch(first_step + k)
        timer = _CallTimer(cell) if cell is not None else None
        start = time.perf_counter()
        loss, _, info = experiment.train_step(batch, first_step + k)
        forward_done = time.perf_counter()
        if timer is not None:
            timer.remove()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step_times.append(time.perf_counter() - start)
        forward_times.append(forward_done - start)
        calls.append(timer.calls if timer is not None else 0)
        nfe_backward.append(float(info.nfe_backward or 0) if info is not None else 0.0)
    f_s = 0.0
    if cell is not None:
        x = model.inject(batch[0]).detach()
        z = torch.zeros_like(x)
        with torch.no_grad():
            f_s = _median_time(lambda: cell(z, x), 5)
    step_s = statistics.median(step_times)
    return StepProfile(
        step_s=step_s,
        forward_s=statistics.median(forward_times),
        f_s=f_s,
        f_calls_forward=statistics.mean(calls),
        nfe_backward=statistics.mean(nfe_backward),
        total_steps=experiment.total_steps,
        run_minutes=experiment.total_steps * step_s / 60.0,
        threads=torch.get_num_threads(),
    )
