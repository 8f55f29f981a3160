"""Solver overhead with and without ``compile_step=True`` on the MDEQ-like conv problem, the compile time it costs
and the number of solves after which it pays off.

Run: ``OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/compiled_step.py [--quick] [--out FILE] [--threads N]``.

Problem: ``conv`` of ``problems.py`` (GN/conv residual block, 32 x 16 x 16, batch 8; ``--quick``: batch 4), float32,
tol 1e-4 (rel), max_iter 100, z0 = 0. Solvers: ``Anderson()``, ``Broyden()``, ``FixedPoint()`` (defaults).

Measured per solver, all in one process:

- compile time: the first solve with ``compile_step=True`` with inductor's on-disk caches disabled (what a user's first
  run pays), minus the median eager solve time;
- overhead = median wall time / (NFE x t_f), eager and compiled, from one interleaved run (eager solve, compiled solve
  and 10 chained calls of f per repeat; t_f the median over all repeats and solvers);
- pays off after: compile time / (eager - compiled time per call of f, times the eager NFE), in solves of this
  problem (per call of f: float32 rounding can move a compiled solve's NFE by a few calls);
- the kernel between two calls of f, timed alone (eager and compiled, in units of t_f): Anderson's step (``_mix``
  eager, ``_mix_compiled`` through torch.compile; the history full), and, as its floor, the time of reading its two
  histories (m - 1 state-sized rows each) once; the kernel also with 8 values per sample, where its time is the
  per-operation cost alone (what compiling can remove; the rest is memory traffic);
- the target of the GPU loop: ``compile_step=True`` no slower than eager on a cheap f (``loop_costs.tanh_map``: D 64,
  batch 8, tol 1e-30 so that every solve makes 30 iterations), per solver, the median ratio of interleaved solves.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor

import deq_core
import problems as P
from deq_core import Anderson, Broyden, FixedPoint
from deq_core._solvers._compile import Compiler
from deq_core._solvers.anderson import _mix, _mix_compiled

TOL, MAX_ITER, TARGET = 1e-4, 100, 1.3
SOLVERS = [("anderson", Anderson()), ("broyden", Broyden()), ("fixed_point", FixedPoint())]
HAS_KERNEL = {"anderson"}  # the solvers that route a kernel through Loop.compiled (the others: eager)


class TimedSteps(deq_core.Solver):
    """Runs ``inner`` and adds up the wall time of its steps (the solver's work between two calls of f, kernels
    included, measured inside the solve where f's work has just passed through the caches)."""

    def __init__(self, inner: deq_core.Solver) -> None:
        self.inner, self.seconds, self.steps = inner, 0.0, 0

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: deq_core.Loop) -> object:
        return self.inner.init(z, fz, g, loop)

    def step(self, state: object, z: Tensor, fz: Tensor, g: Tensor, loop: deq_core.Loop) -> deq_core.Step:
        P.synchronize()
        t0 = time.perf_counter()
        out = self.inner.step(state, z, fz, g, loop)
        P.synchronize()
        self.seconds += time.perf_counter() - t0
        self.steps += 1
        return out


def step_time(problem: P.Problem, solver: deq_core.Solver, compile_step: bool, repeats: int) -> float:
    """Median over ``repeats`` solves of the mean seconds of one step inside the solve."""
    per_step = []
    for _ in range(repeats):
        timed = TimedSteps(solver)
        solve(problem, timed, compile_step)
        per_step.append(timed.seconds / max(timed.steps, 1))
    return P.median(per_step)


def solve(problem: P.Problem, solver: deq_core.Solver, compile_step: bool) -> deq_core.SolverResult:
    return deq_core.solve(problem.f, problem.z0, solver, max_iter=MAX_ITER, tol=TOL, compile_step=compile_step)


def cold_compile_time(problem: P.Problem, solver: deq_core.Solver) -> float:
    """Seconds of the first compiled solve, with inductor's caches off (compiles from scratch)."""
    with torch._inductor.config.patch(force_disable_caches=True):
        t0 = time.perf_counter()
        solve(problem, solver, True)
        P.synchronize()
        return time.perf_counter() - t0


def chained_calls(problem: P.Problem, z: Tensor, n_calls: int) -> Callable[[], None]:
    @torch.no_grad()
    def run() -> None:
        x = z
        for _ in range(n_calls):
            x = problem.f(x)

    return run


def kernel_time(fn: Callable[[], object], repeats: int = 50) -> float:
    """Median seconds of one call of ``fn`` (after 5 warm-up calls)."""
    times = []
    for i in range(repeats + 5):
        P.synchronize()
        t0 = time.perf_counter()
        fn()
        P.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return P.median(times)


TINY_DIM = 8  # a state this small makes a kernel's time its per-operation cost: dispatch, no memory traffic


class _Loop:
    """What Anderson.init asks of the loop, for building its buffers outside a solve."""

    def __init__(self, max_iter: int, compiling: bool) -> None:
        self.max_iter, self.compiling = max_iter, compiling


def _step_calls(h: Any, like: Tensor) -> tuple[Callable[[], None], Callable[[], None]]:
    """Anderson's step on the buffers ``h`` (history full, slot 2) between random iterates like ``like`` (B, D): the
    eager call and the compiled one (what Loop.compiled applies with compile_step=True)."""
    g_old, base_old, g, base = (torch.randn_like(like) for _ in range(4))
    compiled = Compiler(True)(_mix_compiled)

    def eager() -> None:
        _mix(h.dg_rows[2], h.step_rows[2], h.gram_rows[2], h.gram_cols[2], g_old, base_old, g, base, h.dg_t,
             h.steps, h.gram, h.products, h.new_row, h.rhs, h.ridge, h.system, h.diagonal, h.mixed, h.mixed_rows,
             h.zero)  # fmt: skip

    def compiled_call() -> None:
        compiled(h.rows, h.gram, h.slots[2], g_old, base_old, g, base, h.ridge)

    return eager, compiled_call


@torch.no_grad()
def kernel_rows(problem: P.Problem, t_f: float) -> list[list[object]]:
    """Eager and compiled time of Anderson's step, in units of t_f, on the problem's shapes and again with TINY_DIM
    values per sample (the per-operation cost, which compiling can remove; the difference is memory traffic), and
    the time of reading Anderson's two histories once."""
    batch = problem.z0.shape[0]
    dim = problem.z0[0].numel()
    solver = Anderson()
    rows: list[list[object]] = []
    for size in (dim, TINY_DIM):
        like = problem.z0.new_empty(batch, size)
        h = solver.init(like, like, like, _Loop(MAX_ITER, True))  # type: ignore[arg-type]
        h.rows.normal_()
        eager_step, compiled_step = _step_calls(h, like)
        if size == dim:  # the memory traffic Anderson's step cannot avoid: both histories read once
            floor = kernel_time(partial(torch.sum, h.rows, dim=0))
            rows.append(["reading Anderson's two histories once (sum over rows)", P.fmt(floor / t_f), "", ""])
        suffix = "" if size == dim else f", {size} values per sample: per-operation cost"
        eager_t, compiled_t = kernel_time(eager_step), kernel_time(compiled_step)
        rows.append([f"Anderson step (m = {solver.m})" + suffix, P.fmt(eager_t / t_f), P.fmt(compiled_t / t_f),
                     P.fmt(compiled_t / eager_t)])  # fmt: skip
    return rows


def small_problem_ratios(repeats: int) -> dict[str, float]:
    """compile_step=True / eager wall time of 30-iteration solves of loop_costs' tanh map (D 64, batch 8), per solver:
    the median ratio over interleaved repeats (the compiled kernels are compiled before)."""
    from loop_costs import BATCH, DIM, tanh_map

    f, z0 = tanh_map(), torch.zeros(BATCH, DIM)
    ratios = {}
    for name, solver in SOLVERS:

        def run(compile_step: bool, solver: deq_core.Solver = solver) -> object:
            return deq_core.solve(f, z0, solver, max_iter=30, tol=1e-30, compile_step=compile_step)

        run(True)
        times = P.interleaved({"eager": partial(run, False), "compiled": partial(run, True)}, repeats=repeats, warmup=3)
        ratios[name] = P.median_ratio(times["compiled"], times["eager"])
    return ratios


def payoff(compile_s: float, eager_s: float, compiled_s: float, nfe_eager: int, nfe_compiled: int) -> str:
    """Solves after which ``compile_s`` is paid back, comparing the time per call of f (rounding can change a compiled
    solve's NFE by a few calls, which says nothing about the speed of its step) over the eager solve's NFE."""
    saving = (eager_s / nfe_eager - compiled_s / nfe_compiled) * nfe_eager
    if saving <= 0:
        return "never (no saving per solve)"
    return f"{math.ceil(compile_s / saving)} solves"


def main(argv: list[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    repeats = 3 if args.quick else 9
    problem = P.conv_problem(quick=args.quick, seed=args.seed).to(args.device)
    rep = P.Report()
    rep.add(f"## Compiled solver step (`compile_step=True`) on the conv problem, deq-core {deq_core.__version__}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s), float32, "
        f"{problem.description}, tol {TOL:g} (rel), max_iter {MAX_ITER}, z0 = 0; {repeats} interleaved repeats. "
        "overhead = median solve time / (NFE x t_f), t_f = one call of f (median of 10 chained calls per repeat)."
    )
    rep.add()
    compile_s = {}
    for name, solver in SOLVERS:  # first, before anything of this process compiled the kernels
        compile_s[name] = cold_compile_time(problem, solver)
        P.note(f"{name}: first compiled solve {compile_s[name]:.1f} s")
    results = {name: (solve(problem, s, False), solve(problem, s, True)) for name, s in SOLVERS}
    fns: dict[str, Callable[[], object]] = {"f": chained_calls(problem, results["anderson"][0].z, 10)}
    for name, solver in SOLVERS:
        fns[f"{name} eager"] = lambda solver=solver: solve(problem, solver, False)
        fns[f"{name} compiled"] = lambda solver=solver: solve(problem, solver, True)
    times = P.interleaved(fns, repeats=repeats)
    t_f = P.median(times["f"]) / 10
    rows, overheads = [], {}
    for name, solver in SOLVERS:
        eager, compiled = results[name]
        t_e, t_c = P.median(times[f"{name} eager"]), P.median(times[f"{name} compiled"])
        extra = compile_s[name] - t_e
        overheads[name] = (t_e / (eager.nfe * t_f), t_c / (compiled.nfe * t_f))
        diff = float((eager.z - compiled.z).abs().max())  # type: ignore[operator]
        steps = [step_time(problem, solver, c, repeats) / t_f for c in (False, True)]
        paid = payoff(extra, t_e, t_c, eager.nfe, compiled.nfe) if name in HAS_KERNEL else "nothing compiled"
        rows.append([name, eager.nfe, compiled.nfe, P.sci(diff), P.fmt(overheads[name][0]),
                     P.fmt(overheads[name][1]), P.fmt(P.median_ratio(times[f"{name} compiled"],
                     times[f"{name} eager"])), P.fmt(steps[0]), P.fmt(steps[1]), f"{extra:.1f}", paid])  # fmt: skip
    rep.table(["solver", "NFE eager", "NFE compiled", "max |z diff|", "overhead eager", "overhead compiled",
               "time compiled/eager", "step / t_f eager", "step / t_f compiled", "compile time (s)",
               "pays off after"], rows)  # fmt: skip
    rep.add()
    rep.add(
        "step / t_f: the solver's step alone (between two calls of f, inside the solve), per iteration; the rest of "
        "the overhead beyond 1 is the loop's bookkeeping (residual norms, flags, best iterate) and Python."
    )
    rep.add()
    for name in ("anderson",):
        met = "met" if overheads[name][1] <= TARGET else "NOT MET"
        rep.add(f"- {name}: compiled overhead {P.fmt(overheads[name][1])} <= {TARGET}: {met}.")
    rep.add()
    small = small_problem_ratios(10 if args.quick else 60)
    rep.add("### A cheap f: 30 iterations of tanh(W z + x), D 64, batch 8")
    rep.add()
    rep.table(["solver", "time compile_step=True / eager"], [[name, P.fmt(r)] for name, r in small.items()])
    rep.add()
    ok = max(small.values()) <= 1.0
    rep.add(f"- compile_step=True no slower than eager at 30 iterations on this CPU, every solver: "
            f"{'MET' if ok else 'NOT MET'} ({', '.join(f'{k} {P.fmt(v)}' for k, v in small.items())}).")  # fmt: skip
    rep.add()
    rep.add("### The solver's kernel between two calls of f, alone (units of t_f)")
    rep.add()
    rep.table(["kernel", "eager", "compiled", "compiled/eager"], kernel_rows(problem, t_f))
    rep.add()
    rep.add(
        f"Plain fixed-point iteration (no solver kernel: the loop's bookkeeping only) has overhead "
        f"{P.fmt(overheads['fixed_point'][0])} here; a solver's overhead is at least that plus its own kernel."
    )
    words = ["OMP_NUM_THREADS=1", "python", "packages/deq-core/benchmarks/compiled_step.py", *(argv or sys.argv[1:])]
    rep.write(args.out, f"Command: `{' '.join(words)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
