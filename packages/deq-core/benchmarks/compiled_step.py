"""Compiled solves against eager ones: ``compile_step=True`` (everything between two calls of f as one graph) and
``capture=True`` (the iterations between two host checks as one graph, f included), their compile time and the
number of solves after which compiling pays off.

Run: ``OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/compiled_step.py [--quick] [--out FILE] [--threads N]``.

Times are the CPU time of the thread that solves (``problems.work_clock``: on a shared machine the wall time also
counts the time other processes hold the core), as medians of per-repeat ratios of interleaved solves, after the
compiled graphs were made.

- A cheap f (the target): ``loop_costs.tanh_map`` (D 64, batch 8, float32), tol 1e-30 so that every solve makes 30
  iterations; per solver (``FixedPoint()``, ``Anderson(m=6)``, ``Broyden()``), eager against ``compile_step=True``,
  ``capture=True`` with the CPU's default ``check_every`` (1: a graph per iteration, f included) and with
  ``check_every=30`` (the whole solve as one graph after its first iteration). Target: ``compile_step=True`` no slower
  than eager at 30 iterations, for every solver it compiles (all three are capturable: Broyden with its defaults).
- The conv problem (``problems.conv_problem``: GN/conv residual block, 32 x 16 x 16, batch 8; ``--quick``: batch 4),
  float32, tol 1e-4 (rel), max_iter 100, z0 = 0: NFE and the largest difference of z of each mode from eager;
  overhead = solve time / (NFE x t_f), t_f one eager call of f (median of 10 chained calls per repeat); the first
  compiled solve with inductor's caches off, less an eager solve (what a user's first run pays); pays off after:
  that compile time over the time a compiled solve saves.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

import deq_core
import problems as P
from deq_core import Anderson, Broyden, FixedPoint

TOL, MAX_ITER = 1e-4, 100
SMALL_ITERATIONS = 30
SOLVERS = [("fixed_point", FixedPoint()), ("anderson", Anderson(m=6)), ("broyden", Broyden())]
Modes = list[tuple[str, dict[str, object]]]
# (label, keyword arguments of solve) of each mode, eager first; the cheap problem's and the conv problem's
SMALL_MODES: Modes = [("eager", {}), ("compile_step", {"compile_step": True}), ("capture", {"capture": True}),
               ("capture, one graph", {"capture": True, "check_every": SMALL_ITERATIONS})]  # fmt: skip
CONV_MODES = SMALL_MODES[:3]


def modes_of(solver: deq_core.Solver, modes: Modes) -> Modes:
    """The modes a solver runs in: capture only for a capturable one."""
    return [(label, kw) for label, kw in modes if solver.capturable or not kw.get("capture")]


def small_problem(
    repeats: int, clock: Callable[[], float], modes: Modes = SMALL_MODES
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Per solver and mode (``modes``, eager first), the median time ratio against eager of 30-iteration solves of the
    cheap f; and, per mode, for how many solvers its NFE differed from the eager 30."""
    from loop_costs import BATCH, DIM, tanh_map

    f, z0 = tanh_map(), torch.zeros(BATCH, DIM)
    ratios: dict[str, dict[str, float]] = {}
    nfe_differs: dict[str, int] = {}
    for name, solver in SOLVERS:
        runs = {}
        for label, kw in modes_of(solver, modes):
            run = partial(deq_core.solve, f, z0, solver, max_iter=SMALL_ITERATIONS, tol=1e-30, **kw)
            nfe_differs[label] = nfe_differs.get(label, 0) + int(run().nfe != SMALL_ITERATIONS)  # compiles
            runs[label] = run
        times = P.interleaved(runs, repeats=repeats, warmup=3, clock=clock)
        ratios[name] = {label: P.median_ratio(times[label], times["eager"]) for label in runs if label != "eager"}
        P.note(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios[name].items()))
    return ratios, nfe_differs


def compile_step_target(ratios: dict[str, dict[str, float]]) -> str:
    """The line of the target "compile_step=True no slower than eager at 30 iterations", from ``small_problem``'s
    ratios (a solver that is not capturable runs the eager loop either way: its ratio is the spread of equal runs)."""
    compiled = {name: r["compile_step"] for name, r in ratios.items() if dict(SOLVERS)[name].capturable}
    eager = {name: r["compile_step"] for name, r in ratios.items() if name not in compiled}
    ok = max(compiled.values()) <= 1.0
    spread = "".join(f"; {k} is not capturable and runs the eager loop: {P.fmt(v)}, the spread of two equal runs"
                     for k, v in eager.items())  # fmt: skip
    return (f"- compile_step=True no slower than eager at {SMALL_ITERATIONS} iterations, every solver it compiles: "
            f"{'MET' if ok else 'NOT MET'} (" + ", ".join(f"{k} {P.fmt(v)}" for k, v in compiled.items())
            + f"{spread}).")  # fmt: skip


def chained_calls(problem: P.Problem, z: Tensor, n_calls: int) -> Callable[[], None]:
    @torch.no_grad()
    def run() -> None:
        x = z
        for _ in range(n_calls):
            x = problem.f(x)

    return run


def solve(problem: P.Problem, solver: deq_core.Solver, **kw: object) -> deq_core.SolverResult:
    return deq_core.solve(problem.f, problem.z0, solver, max_iter=MAX_ITER, tol=TOL, **kw)


def first_solve_time(problem: P.Problem, solver: deq_core.Solver, clock: Callable[[], float], **kw: object) -> float:
    """Seconds of the first solve in this mode, with inductor's caches off (compiles from scratch)."""
    with torch._inductor.config.patch(force_disable_caches=True):
        t0 = clock()
        solve(problem, solver, **kw)
        P.synchronize()
        return clock() - t0


def payoff(compile_s: float, eager_s: float, compiled_s: float) -> str:
    """Solves after which ``compile_s`` is paid back by the time a compiled solve saves."""
    saving = eager_s - compiled_s
    if saving <= 0:
        return "never (no saving per solve)"
    return f"{math.ceil(compile_s / saving)} solves"


def conv_rows(problem: P.Problem, repeats: int, clock: Callable[[], float]) -> list[list[object]]:
    """The conv problem's table: per solver and compiled mode, NFE, difference from eager, overheads, time ratio,
    compile time and pay-off."""
    rows: list[list[object]] = []
    for name, solver in SOLVERS:
        modes = CONV_MODES if solver.capturable else CONV_MODES[:1]  # one that is not runs the eager loop
        first = {label: first_solve_time(problem, solver, clock, **kw) for label, kw in modes}  # compiles first
        results = {label: solve(problem, solver, **kw) for label, kw in modes}
        fns: dict[str, Callable[[], object]] = {"f": chained_calls(problem, results["eager"].z, 10)}  # type: ignore
        fns.update({label: partial(solve, problem, solver, **kw) for label, kw in modes})
        times = P.interleaved(fns, repeats=repeats, clock=clock)
        t_f = P.median(times["f"]) / 10
        eager = results["eager"]
        t_eager = P.median(times["eager"])
        for label, _ in modes[1:]:
            res, t_mode = results[label], P.median(times[label])
            diff = float((res.z - eager.z).abs().max())  # type: ignore[operator]
            rows.append([name, label, f"{eager.nfe} / {res.nfe}", P.sci(diff), P.fmt(t_eager / (eager.nfe * t_f)),
                         P.fmt(t_mode / (res.nfe * t_f)), P.fmt(P.median_ratio(times[label], times["eager"])),
                         f"{first[label] - first['eager']:.1f}",
                         payoff(first[label] - first["eager"], t_eager, t_mode)])  # fmt: skip
        if len(modes) == 1:
            rows.append([name, "(not capturable: compile_step runs the eager loop)", f"{eager.nfe}", "",
                         P.fmt(t_eager / (eager.nfe * t_f)), "", "", "", ""])  # fmt: skip
        P.note(f"conv, {name}: done")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    clock = P.work_clock(args.device)
    repeats = 5 if args.quick else 40
    rep = P.Report()
    rep.add(f"## Compiled solves against eager, deq-core {deq_core.__version__}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s), float32. Times: "
        f"{'CPU time of the solving thread' if clock is not time.perf_counter else 'wall time'}, medians of the "
        "per-repeat ratios of interleaved solves, after the graphs were compiled."
    )
    rep.add()
    rep.add(f"### A cheap f: {SMALL_ITERATIONS} iterations of tanh(W z + x), D 64, batch 8, {repeats} repeats")
    rep.add()
    ratios, nfe_differs = small_problem(repeats, clock)
    labels = [label for label, _ in SMALL_MODES[1:]]
    cells = [[name, *(P.fmt(r[k]) if k in r else "not capturable" for k in labels)] for name, r in ratios.items()]
    rep.table(["solver", *(f"{label} / eager" for label in labels)], cells)
    rep.add()
    rep.add(compile_step_target(ratios))
    rep.add(f"- Every compiled mode made the eager NFE ({SMALL_ITERATIONS}) for every solver: "
            f"{'yes' if not any(nfe_differs.values()) else 'NO: ' + str(nfe_differs)}.")  # fmt: skip
    rep.add()
    problem = P.conv_problem(quick=args.quick, seed=args.seed).to(args.device)
    conv_repeats = 3 if args.quick else 9
    rep.add(f"### The conv problem: {problem.description}, tol {TOL:g} (rel), max_iter {MAX_ITER}, z0 = 0, "
            f"{conv_repeats} repeats")  # fmt: skip
    rep.add()
    rep.table(["solver", "mode", "NFE eager / mode", "max |z diff| from eager", "overhead eager", "overhead mode",
               "time mode / eager", "first solve's compile time (s)", "pays off after"],
              conv_rows(problem, conv_repeats, clock))  # fmt: skip
    rep.add()
    rep.add(
        "overhead = solve time / (NFE x t_f), t_f one eager call of f: what the loop and the solver add to the calls "
        "of f (with capture, f itself runs compiled inside the graph, so the overhead can fall below 1)."
    )
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
