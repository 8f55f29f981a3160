"""What a solve costs beyond f, where f is cheap: operations dispatched, host synchronisations, set-up and time,
deq-core beside TorchDEQ 0.1.0, with the targets of the GPU loop.

Run: ``OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/loop_costs.py [--quick] [--out FILE] [--threads N]``.

Problem: f(z) = tanh(z W^T + x), D = 64, batch 8, float32, ||W||_2 = 0.9, x = N(0, I); tol 1e-30 (relative), so
that every solve runs to its iteration limit. Solvers: fixed-point iteration (TorchDEQ: ``fixed_point_iter``),
Anderson (both m = 6, beta / tau = 1) and Broyden (each library's defaults: every update kept).

Measured (``SolveCosts``):

- operations: every ATen operation dispatched during a solve (seen by a ``TorchDispatchMode``: views, copies and
  kernels alike; on a GPU each kernel is one launch), except those inside f. ``per iteration``: the median over the
  ``ITERATIONS`` iterations of a long solve of the operations between two calls of f (the steady state; Broyden's
  buffers, which double as updates arrive, dispatch a few dozen more operations once at each growth, 16 and 32 ...
  updates); ``set-up``: what a solve of ``SETUP_ITERATIONS`` iterations dispatches beyond that many iterations'
  worth (checks, buffers, the result, less what the first iterations cost below the steady state); also the
  operations outside the iterations: before the first call of f and after the last;
- host synchronisations: reads of a tensor's value on the host (``.item()``, ``bool(t)``, ``float(t)``, ``.tolist()``,
  ops whose output size depends on values such as ``nonzero``), per iteration: all of a solve's divided by its
  iterations; for deq-core with its default ``check_every`` and with ``check_every=4``;
- time at 10 iterations, Anderson: the median ratio of interleaved solves, ours / TorchDEQ (the set-up dominates
  there), in CPU time of the solving thread (``problems.work_clock``: the wall time of a shared machine also counts
  the time other processes hold the core).

The report ends with every target of the GPU loop's goal beside its figure, met or not: the counts and the time
above, and, measured again here with the functions of the benchmarks they come from, ``compile_step=True`` against
eager at 30 iterations (``compiled_step.py``), a training step's peak memory against TorchDEQ's (``end_to_end.py``)
and our NFE against TorchDEQ's on every problem and method of the solver benchmark (``solvers.py``; ``--quick``: its
reduced sizes).

All counts are exact (no timing); the times are ratios from one run.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import deq_core
import problems as P

DIM, BATCH = 64, 8
ITERATIONS = 32  # the iteration limit of the solves whose operations per iteration and host syncs are counted
SETUP_ITERATIONS = 10  # and of those whose set-up is
TOL = 1e-30  # never met: every solve runs to its limit
# (label, our solver, our options, TorchDEQ's solver, its options)
SOLVERS: list[tuple[str, str, dict[str, object], str, dict[str, object]]] = [
    ("fixed point", "fixed_point", {}, "fixed_point_iter", {}),
    ("Anderson", "anderson", {"m": 6, "beta": 1.0}, "anderson", {"m": 6, "tau": 1.0}),
    ("Broyden", "broyden", {}, "broyden", {}),
]
# The targets: operations per iteration per solver, operations of a solve's set-up.
OPS_PER_ITERATION = {"fixed point": 10, "Anderson": 30, "Broyden": 40}
SETUP_OPS = 30
CHECK_EVERY = 4
# ATen operations whose output size depends on tensor values: they wait for the device like .item() does.
_SYNCING = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique")


class Dispatched(TorchDispatchMode):
    """Counts the ATen operations dispatched while active (``ops``) and the host synchronisations among them
    (``syncs``); ``.tolist()``, which reads a CPU tensor without dispatching, is counted too. Operations inside
    :meth:`excluded` (f's own) are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.syncs = 0
        self.names: dict[str, int] = {}
        self.at_calls: list[int] = []  # ops counted when each call of f started
        self.syncs_at_calls: list[int] = []  # host synchronisations counted when each call of f started
        self._paused = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not self._paused:
            name = str(func.overloadpacket)
            self.ops += 1
            self.names[name] = self.names.get(name, 0) + 1
            if name.startswith(_SYNCING):
                self.syncs += 1
        return func(*args, **(kwargs or {}))

    def excluded(self, f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        """f with its own operations left out of the counts."""

        def run(z: Tensor) -> Tensor:
            self.at_calls.append(self.ops)
            self.syncs_at_calls.append(self.syncs)
            self._paused += 1
            try:
                return f(z)
            finally:
                self._paused -= 1

        return run

    @property
    def outside_iterations(self) -> int:
        """Operations before the first call of f and after the last one (f's calls made in one solve)."""
        return self.at_calls[0] + self.ops - self.at_calls[-1] if self.at_calls else self.ops

    @contextlib.contextmanager
    def tolist_counted(self) -> Iterator[None]:
        """Count ``Tensor.tolist`` calls (not dispatched for CPU tensors) as host synchronisations while active."""
        original = torch.Tensor.tolist

        def counted(tensor: Tensor) -> Any:
            if not self._paused:
                self.syncs += 1
            return original(tensor)

        torch.Tensor.tolist = counted  # type: ignore[method-assign]
        try:
            yield
        finally:
            torch.Tensor.tolist = original  # type: ignore[method-assign]


def count(run: Callable[[Callable[[Tensor], Tensor], Tensor], object]) -> Dispatched:
    """The operations and host synchronisations of ``run(f, z0)``, f's own left out (f and z0 are made before)."""
    counter = Dispatched()
    f, z0 = counter.excluded(tanh_map()), torch.zeros(BATCH, DIM)
    with counter, counter.tolist_counted():
        run(f, z0)
    return counter


def tanh_map(dim: int = DIM, batch: int = BATCH, seed: int = 0) -> Callable[[Tensor], Tensor]:
    """f(z) = tanh(z W^T + x), ||W||_2 = 0.9, float32."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, dim, generator=gen)
    w = 0.9 * w / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(batch, dim, generator=gen)
    return lambda z: torch.tanh(z @ w.T + x)


def ours(solver: str, options: dict[str, object], max_iter: int, **settings: Any) -> Callable[..., object]:
    def run(f: Callable[[Tensor], Tensor], z0: Tensor) -> object:
        return deq_core.solve(f, z0, solver, max_iter=max_iter, tol=TOL, **options, **settings)

    return run


def tdeq(solver: str, options: dict[str, object], max_iter: int) -> Callable[..., object]:
    from torchdeq.solver import get_solver

    def run(f: Callable[[Tensor], Tensor], z0: Tensor) -> object:
        with torch.no_grad():
            return get_solver(solver)(f, z0, max_iter=max_iter, tol=TOL, stop_mode="rel", **options)

    return run


@dataclass(frozen=True)
class SolveCosts:
    """Operations and host synchronisations of a solve (see the module docstring)."""

    ops_per_iteration: float
    setup_ops: float
    outside_ops: int
    syncs_per_iteration: float


def solve_costs(make: Callable[[int], Callable[[Callable[[Tensor], Tensor], Tensor], object]]) -> SolveCosts:
    """The costs of the solves ``make(max_iter)(f, z0)`` (one call of f per iteration) of ``ITERATIONS`` and
    ``SETUP_ITERATIONS`` iterations."""
    long, short = count(make(ITERATIONS)), count(make(SETUP_ITERATIONS))
    marks = long.at_calls
    per_iteration = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    return SolveCosts(per_iteration, short.ops - len(short.at_calls) * per_iteration, short.outside_iterations,
                      long.syncs / len(marks))  # fmt: skip


def time_ratio_at(iterations: int, repeats: int) -> float:
    """Median ratio of interleaved times (CPU time of the solving thread, ``problems.work_clock``), ours / TorchDEQ,
    of Anderson (m = 6) solves of ``iterations``."""
    f, z0 = tanh_map(), torch.zeros(BATCH, DIM)
    _, name, opts, t_name, t_opts = SOLVERS[1]
    times = P.interleaved(
        {"ours": lambda: ours(name, opts, iterations)(f, z0), "tdeq": lambda: tdeq(t_name, t_opts, iterations)(f, z0)},
        repeats=repeats,
        warmup=3,
        clock=P.work_clock("cpu"),
    )
    return P.median_ratio(times["ours"], times["tdeq"])


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def other_targets(args: Any) -> list[str]:
    """The goal's targets measured by the other benchmarks, each beside its figure, measured again here with their
    functions: compile_step=True against eager (``compiled_step.py``, 30 iterations of the same f), a training step's
    peak memory against TorchDEQ's (``end_to_end.py``, one step per model and solver after the warm-up), and our NFE
    against TorchDEQ's on every problem of the solver benchmark (``solvers.py``, one solve each)."""
    import compiled_step
    import end_to_end
    import solvers

    repeats = 10 if args.quick else 40
    ratios, _ = compiled_step.small_problem(repeats, P.work_clock("cpu"), compiled_step.SMALL_MODES[:2])
    peaks = end_to_end.peak_ratios(args.quick, args.seed, torch.device("cpu"))
    worst = max(peaks, key=peaks.__getitem__)
    peak_line = (f"- Peak memory of a training step at or below TorchDEQ's on every model and solver: "
                 f"{verdict(max(peaks.values()) <= 1.0)} (ours / TorchDEQ {P.fmt(min(peaks.values()))} to "
                 f"{P.fmt(peaks[worst])}, the largest on {worst}).")  # fmt: skip
    return [compiled_step.compile_step_target(ratios), peak_line,
            solvers.nfe_target(solvers.nfe_pairs(args.quick, args.seed, "cpu"))]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    from importlib.metadata import version

    rep = P.Report()
    rep.add(f"## A solve's costs beyond f: deq-core {deq_core.__version__} vs TorchDEQ {version('torchdeq')}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s); f(z) = tanh(z W^T + x), D {DIM}, "
        f"batch {BATCH}, float32, tol {TOL:g}. Operations: ATen operations dispatched beyond f's own (views, "
        f"copies and kernels); per iteration = median between two calls of f in a solve of {ITERATIONS} iterations, "
        f"set-up = the rest of a solve of {SETUP_ITERATIONS}. Host syncs (.item(), bool(), .tolist() and "
        f"value-dependent ops) per iteration = a solve's / its iterations ({ITERATIONS})."
    )
    rep.add()
    rows, costs = [], {}
    for label, name, opts, t_name, t_opts in SOLVERS:
        mine = solve_costs(lambda n, name=name, opts=opts: ours(name, opts, n))
        checked = solve_costs(lambda n, name=name, opts=opts: ours(name, opts, n, check_every=CHECK_EVERY))
        theirs = solve_costs(lambda n, t_name=t_name, t_opts=t_opts: tdeq(t_name, t_opts, n))
        costs[label] = (mine, checked, theirs)
        rows.append([label, P.fmt(mine.ops_per_iteration), P.fmt(theirs.ops_per_iteration), P.fmt(mine.setup_ops),
                     P.fmt(theirs.setup_ops), f"{mine.outside_ops} / {theirs.outside_ops}",
                     P.fmt(mine.syncs_per_iteration), P.fmt(checked.syncs_per_iteration),
                     P.fmt(theirs.syncs_per_iteration)])  # fmt: skip
        P.note(f"{label}: counted")
    rep.table(["solver", "ops / iteration ours", "ops / iteration TorchDEQ", "set-up ops ours", "set-up ops TorchDEQ",
               "ops before the first f and after the last, ours / TorchDEQ",
               "syncs / iteration ours (default check_every)", f"syncs / iteration ours (check_every={CHECK_EVERY})",
               "syncs / iteration TorchDEQ"], rows)  # fmt: skip
    rep.add()
    rep.add(
        "A negative set-up means that a solve's first iterations dispatch fewer operations than its steady state "
        "(TorchDEQ's Anderson: 8 and 74 before 90; ours: no step before the first difference, Broyden's update only "
        "from the second iteration); the operations before the first call of f and after the last are beside it."
    )
    rep.add()
    ratio = time_ratio_at(10, 5 if args.quick else 40)
    rep.add("### The goal's targets")
    rep.add()
    for label, target in OPS_PER_ITERATION.items():
        mine, _, theirs = costs[label]
        ok = mine.ops_per_iteration <= target
        rep.add(f"- Operations per iteration beyond f, {label} <= {target}: {verdict(ok)} "
                f"({P.fmt(mine.ops_per_iteration)}; TorchDEQ {P.fmt(theirs.ops_per_iteration)}).")  # fmt: skip
    setups = {label: c[0].setup_ops for label, c in costs.items()}
    ok = max(setups.values()) <= SETUP_OPS
    rep.add(f"- Set-up of a solve <= {SETUP_OPS} operations: {verdict(ok)} ("
            + ", ".join(f"{k} {P.fmt(v)}" for k, v in setups.items()) + "; TorchDEQ "
            + ", ".join(f"{k} {P.fmt(c[2].setup_ops)}" for k, c in costs.items()) + ").")  # fmt: skip
    syncs = {label: c[1].syncs_per_iteration for label, c in costs.items()}
    ok = max(syncs.values()) <= 1 / CHECK_EVERY
    rep.add(f"- Host syncs with check_every={CHECK_EVERY}: at most one every {CHECK_EVERY} iterations: {verdict(ok)} "
            "(per iteration: " + ", ".join(f"{k} {P.fmt(v)}" for k, v in syncs.items()) + "; TorchDEQ "
            + ", ".join(f"{k} {P.fmt(c[2].syncs_per_iteration)}" for k, c in costs.items()) + ").")  # fmt: skip
    rep.add(f"- Anderson (m = 6) at 10 iterations no slower than TorchDEQ's: {verdict(ratio <= 1.0)} "
            f"(time ours / TorchDEQ {P.fmt(ratio)}).")  # fmt: skip
    for line in other_targets(args):
        rep.add(line)
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
