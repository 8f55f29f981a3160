"""Where the wall time of a DEQ training step goes: inside f (its forward calls and the backward passes through its
graph) or outside it (the solvers, weight normalization, the rest of the model, the optimizer). For the profiling
benchmarks of the task packages (``benchmarks/profile_step.py``).

Usage: wrap f (any callable whose first argument is the state, a tensor or a tuple of tensors) and the regions of
the step to be timed, run the step between :meth:`StepTimer.start` and :meth:`StepTimer.stop`, read
:meth:`StepTimer.split`::

    timer = StepTimer()
    model.cell = timer.wrap_f(model.cell)          # an instance attribute shadows the method
    model.deq.forward = timer.wrap("deq forward", model.deq.forward)
    timer.start(); step(); timer.stop()
    timer.split()   # {"f forward (solver calls)": s, "f forward (with autograd)": s, "f backward": s, ...}

Forward calls of f are timed around the call. Backward passes through f are timed by two identity autograd
Functions around a call of f with autograd: one on f's output, whose backward runs when the gradient reaches f's output
(a pass starts), one on f's input state, whose backward runs once the gradient has passed f's graph (the pass ends).
The passes of an implicit backward are its vector-Jacobian products through the tracked call f(z*) plus the final
pass to the parameters; the wall time between passes is the adjoint solver's. A pass is only timed when the state
f was called with requires grad (as deq-core's z* does). On CUDA, pass ``synchronize`` so that the clock waits for
the GPU at every mark (which slows the step down: use the split's fractions, not its absolute times).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor

from deq_core.nn import cached_weights as _cached_weights

__all__ = [
    "F_PARTS",
    "Profile",
    "StepTimer",
    "interleaved_ratio",
    "profile_steps",
    "split_rows",
    "split_summary",
    "training_step",
]

T = TypeVar("T")


@dataclass
class _Clock:
    synchronize: Callable[[], None] | None

    def now(self) -> float:
        if self.synchronize is not None:
            self.synchronize()
        return time.perf_counter()


@dataclass
class StepTimer:
    """Accumulates, between :meth:`start` and :meth:`stop`, the time of wrapped f calls, of the backward passes
    through f's graph and of named regions (seconds)."""

    synchronize: Callable[[], None] | None = None
    regions: dict[str, float] = field(default_factory=dict)
    f_calls: int = 0
    f_seconds: float = 0.0
    f_autograd_calls: int = 0
    f_autograd_seconds: float = 0.0
    passes: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each backward pass through f
    _pass_start: float | None = None
    _span: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        self._clock = _Clock(self.synchronize)

    def start(self) -> None:
        """Forget what was measured; the step starts now."""
        self.regions, self.passes, self._pass_start = {}, [], None
        self.f_calls = self.f_autograd_calls = 0
        self.f_seconds = self.f_autograd_seconds = 0.0
        self._span = (self._clock.now(), 0.0)

    def stop(self) -> None:
        self._span = (self._span[0], self._clock.now())

    @property
    def step_seconds(self) -> float:
        return self._span[1] - self._span[0]

    def wrap(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` with its wall time added to ``regions[name]``."""

        def timed(*args: Any, **kwargs: Any) -> T:
            t0 = self._clock.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.regions[name] = self.regions.get(name, 0.0) + self._clock.now() - t0

        return timed

    def wrap_f(self, f: Callable[..., Any]) -> Callable[..., Any]:
        """f (state first, a tensor or a tuple/list of tensors) with its forward calls and backward passes timed."""

        def timed(z: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = self._clock.now()
            if not torch.is_grad_enabled():
                out = f(z, *args, **kwargs)
                self.f_calls += 1
                self.f_seconds += self._clock.now() - t0
                return out
            out = _restructure(_mark_backward(self._pass_ended, _tensors(z)), z)
            out = f(out, *args, **kwargs)
            out = _restructure(_mark_backward(self._pass_started, _tensors(out)), out)
            self.f_autograd_calls += 1
            self.f_autograd_seconds += self._clock.now() - t0
            return out

        return timed

    def _pass_started(self) -> None:
        self._pass_start = self._clock.now()

    def _pass_ended(self) -> None:
        if self._pass_start is not None:
            self.passes.append((self._pass_start, self._clock.now()))
            self._pass_start = None

    def split(self) -> dict[str, float]:
        """The step's wall time by part (seconds), from the regions "forward" (the model's forward and loss),
        "deq forward" (the DEQ layer's call, inside "forward"), "weight norm" (:meth:`cached_weights`, inside
        "forward"), "backward" (``loss.backward()``) and "optimizer" (its step), where they were timed:

        - "f forward: solver calls", "f forward: with autograd" (the tracked call), "f backward" (all passes through
          f's graph): f's own work;
        - "forward solver": "deq forward" minus the calls of f in it; "adjoint solver": between the backward passes;
        - "weight norm": computing the weights once per step;
        - "rest of forward" (stem, head, loss, ...), "rest of backward" (before the first and after the last pass
          through f: the head's, the stem's and the weight norm's backward), "optimizer", and "other" (the remainder
          of the step: zero_grad, the timer's own marks, ...).
        """
        r = self.regions
        f_fwd, f_grad, f_bwd = self.f_seconds, self.f_autograd_seconds, self.f_backward_seconds()
        inside_backward = (self.passes[-1][1] - self.passes[0][0]) if self.passes else 0.0
        parts = {
            "f forward: solver calls": f_fwd,
            "f forward: with autograd": f_grad,
            "f backward": f_bwd,
            "forward solver": r.get("deq forward", 0.0) - f_fwd - f_grad,
            "adjoint solver": self.between_passes_seconds(),
            "weight norm": r.get("weight norm", 0.0),
            "rest of forward": r.get("forward", 0.0) - r.get("deq forward", 0.0) - r.get("weight norm", 0.0),
            "rest of backward": r.get("backward", 0.0) - inside_backward,
            "optimizer": r.get("optimizer", 0.0),
        }
        parts["other"] = self.step_seconds - sum(parts.values())
        return parts

    @contextmanager
    def cached_weights(self, module: torch.nn.Module) -> Iterator[None]:
        """:func:`deq_core.cached_weights` (the original, also when a script has replaced it by this method to time
        a model that calls it) with the computation of the weights (on entry) timed as "weight norm"."""
        t0 = self._clock.now()
        with _cached_weights(module):
            self.regions["weight norm"] = self.regions.get("weight norm", 0.0) + self._clock.now() - t0
            yield

    def f_backward_seconds(self) -> float:
        return sum(end - start for start, end in self.passes)

    def between_passes_seconds(self) -> float:
        """Wall time from the end of the first backward pass through f to the start of the last: the adjoint solver's
        own work (its bookkeeping between vector-Jacobian products)."""
        return sum(b[0] - a[1] for a, b in zip(self.passes, self.passes[1:]))


def training_step(
    loss_fn: Callable[[], Tensor], optimizer: torch.optim.Optimizer, timer: StepTimer | None = None
) -> Callable[[], None]:
    """A training step as a function of no arguments: zero the gradients, ``loss = loss_fn()`` (a scalar tensor),
    ``loss.backward()``, ``optimizer.step()``; with ``timer``, the three parts are timed as the regions "forward",
    "backward" and "optimizer"."""

    def region(name: str, fn: Callable[..., T]) -> Callable[..., T]:
        return fn if timer is None else timer.wrap(name, fn)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = region("forward", loss_fn)()
        region("backward", loss.backward)()
        region("optimizer", optimizer.step)()

    return step


def _tensors(state: Any) -> tuple[Tensor, ...]:
    return (state,) if isinstance(state, Tensor) else tuple(state)


def _restructure(tensors: tuple[Tensor, ...], like: Any) -> Any:
    if isinstance(like, Tensor):
        return tensors[0]
    return type(like)(tensors)


def _mark_backward(mark: Callable[[], None], tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """``tensors`` unchanged, but ``mark()`` is called when the backward pass reaches them (nothing to mark when
    none of them requires grad)."""
    if not any(t.requires_grad for t in tensors):
        return tensors
    return _BackwardMark.apply(mark, *tensors)


class _BackwardMark(torch.autograd.Function):
    """Identity on its tensors; its backward calls the given mark (on f's output: a backward pass through f starts;
    on f's input state: it ends)."""

    @staticmethod
    def forward(ctx: Any, mark: Callable[[], None], *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.mark = mark
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Any, ...]:
        ctx.mark()
        return (None, *grads)


# --------------------------------------------------------------------------------------------------------------------
# measuring and reporting (the profiling benchmarks of deq-vision and deq-lm)

F_PARTS = ("f forward: solver calls", "f forward: with autograd", "f backward")


def _timed(fn: Callable[[], object], sync: Callable[[], None] | None) -> float:
    clock = _Clock(sync)
    start = clock.now()
    fn()
    return clock.now() - start


def interleaved_ratio(
    a: Callable[[], object], b: Callable[[], object], steps: int, sync: Callable[[], None] | None = None
) -> tuple[float, float, float]:
    """(median of the per-pair ratios a/b, median seconds of a, of b) over ``steps`` pairs run next to each other,
    after one untimed call of each."""
    a(), b()
    ta, tb = [], []
    for _ in range(steps):
        ta.append(_timed(a, sync))
        tb.append(_timed(b, sync))
    return statistics.median(x / y for x, y in zip(ta, tb)), statistics.median(ta), statistics.median(tb)


@dataclass(frozen=True)
class Profile:
    """Medians over the profiled steps: seconds per part (:meth:`StepTimer.split`), the instrumented step's seconds,
    the calls of f and the backward passes through f per step."""

    parts: dict[str, float]
    total: float
    f_calls: int
    passes: int


def profile_steps(timer: StepTimer, step: Callable[[], object], steps: int) -> Profile:
    """Run ``step`` (instrumented with ``timer``) once untimed, then ``steps`` times between start and stop."""
    step()
    splits, totals, calls, passes = [], [], [], []
    for _ in range(steps):
        timer.start()
        step()
        timer.stop()
        splits.append(timer.split())
        totals.append(timer.step_seconds)
        calls.append(timer.f_calls + timer.f_autograd_calls)
        passes.append(len(timer.passes))
    parts = {k: statistics.median(sp[k] for sp in splits) for k in splits[0]}
    return Profile(parts, statistics.median(totals), int(statistics.median(calls)), int(statistics.median(passes)))


def split_rows(prof: Profile, ratio: float) -> list[list[str]]:
    """Table rows: part, milliseconds, share of the step, and that share times ``ratio`` (the uninstrumented step's
    time in units of a reference step, e.g. the explicit twin's)."""
    return [
        [name, f"{1e3 * sec:.1f}", f"{100 * sec / prof.total:.1f}%", f"{ratio * sec / prof.total:.2f}"]
        for name, sec in prof.parts.items()
    ]


def split_summary(prof: Profile, ratio: float, reference: str) -> str:
    """One paragraph: how much of the step (and of ``ratio``, the step in units of the ``reference`` step) is f's own
    work, the solvers' bookkeeping, and the rest."""
    inside = sum(prof.parts[k] for k in F_PARTS) / prof.total
    solvers = (prof.parts["forward solver"] + prof.parts["adjoint solver"]) / prof.total
    rest = 1 - inside - solvers
    return (
        f"DEQ step / {reference} step: {ratio:.2f}x (uninstrumented, interleaved). f's own work ({prof.f_calls} calls "
        f"of f, {prof.passes} backward passes through its graph) is {100 * inside:.0f}% of the step, i.e. "
        f"{ratio * inside:.2f}x the {reference} step; the two solvers' bookkeeping {100 * solvers:.0f}% "
        f"({ratio * solvers:.2f}x); weight norm, the rest of the model, loss, optimizer and the remainder "
        f"{100 * rest:.0f}% ({ratio * rest:.2f}x). Without any solver overhead the step would cost "
        f"{ratio * (1 - solvers):.2f}x the {reference} step."
    )
