"""Where the time of the copy-memory runs at T = 400 goes, what the fused attention saves, and what one budget for the
five ``copy400-*`` presets costs on one CPU thread.

    python packages/deq-lm/benchmarks/profile_copy400.py [--quick] [--steps 3] [--budgets 15000:1000 ...]
        [--set key=value ...] [--device cpu] [--out FILE]

1. ``copy400-deq-transformer`` (32 sequences of 420 tokens), the attention "gathered" (before) against "fused"
   (after; ``deq_lm.models.attention``), the same model and batch, in pairs run next to each other: one call of f
   without autograd (a solver iteration), one vector-Jacobian product through f (an adjoint iteration), a training
   step that solves for the equilibrium, a pretraining step (f unrolled ``deq.pretrain_depth`` times), an evaluation
   of the validation set; and f alone at the sizes of ``copy-deq-transformer`` (T = 100) and
   ``pydoc-deq-transformer`` (width 128, 4 heads of 32, 64 positions and 64 of memory).
2. The fused model: its training step split by ``lab.steptime.StepTimer`` (f's calls, the backward passes through
   f, the two solvers' own work, the rest; wall time), and one call of f split into attention, FFN and the norms with
   their residual sums and dropout (each part timed alone, without autograd and as a vector-Jacobian product), with
   the segment's setup (the z-independent work f does not repeat) and the operators that take the time (also for
   the gathered attention).
3. Every ``copy400-*`` preset: seconds per training step (solving; pretraining) and per evaluation of the validation
   and test sets, and the hours of one run for each ``STEPS:EVAL_EVERY`` of ``--budgets``.

Models are freshly initialized (seed 0) and train on the batch of step 0: their solves run to their iteration limits
(forward ``deq.max_iter``, the top of the jittered range; backward ``deq.backward_max_iter``; evaluation
``deq.eval_max_iter``), which bounds what a step costs later in training. Times are CPU seconds of this one-thread
process (``time.process_time``), which other jobs on a shared machine disturb less than wall time (only the split of
part 2 is wall time); each figure is the median over ``--steps`` repetitions after one untimed run. ``--set`` applies
to every preset; ``--quick``: T = 12, 4 sequences, small solver limits, one repetition.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _lm_bench as lb
import profile_step as ps
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

import deq_core
from deq_core.train.cli import add_device_argument
from deq_lm.models import DEQTransformerCell
from lab.steptime import F_PARTS, StepTimer, profile_steps, split_rows

OTHER_SIZES = ("copy-deq-transformer", "pydoc-deq-transformer")  # T = 100; width 128 with 64 positions of memory
PRESETS = ("copy400-deq-transformer", "copy400-deq-trellisnet", "copy400-tcn", "copy400-lstm", "copy400-gru")
QUICK = ["T=12", "batch_size=4", "n_valid=8", "n_test=8", "max_iter=4", "backward_max_iter=4", "eval_max_iter=4"]
QUICK_DEQ = ["max_iter_jitter=0", "pretrain_depth=2"]
CPU = torch.device("cpu")


def cpu_seconds(fn: Callable[[], object]) -> float:
    """CPU seconds of one call of ``fn`` (this process, all its threads)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU seconds of ``repeats`` calls of ``fn``, after one untimed call."""
    fn()
    return statistics.median(cpu_seconds(fn) for _ in range(repeats))


def plan_of(s: ps.Setup, pretrain: bool) -> deq_core.Plan | None:
    """The Plan of a pretraining step (f unrolled) or, for ``pretrain`` False, None (solve to the limits)."""
    return deq_core.Plan(unroll=s.cfg.deq.pretrain_depth) if pretrain else None


def training_step(s: ps.Setup, pretrain: bool, timer: StepTimer | None = None) -> Callable[[], None]:
    """One training step of ``s`` (as ``profile_step.step_fn``) under the plan of a solving or pretraining step."""
    step = ps.step_fn(s, timer)

    def planned() -> None:
        with deq_core.use_plan(s.model, plan_of(s, pretrain)):
            step()

    return planned


def evaluation(s: ps.Setup, split: str) -> Callable[[], dict[str, float]]:
    """The problem's evaluation of the whole ``split`` in eval mode (the DEQ's evaluation limit), as training runs
    it."""
    problem = ps.build_problem(s.cfg)

    def run() -> dict[str, float]:
        s.model.eval()
        try:
            return problem.evaluate(s.model, split, CPU)
        finally:
            s.model.train()

    return run


class CellProbe:
    """The DEQ-Transformer's cell at a state near its equilibrium: the segment's context (with the setup's memory)
    and z (after the forward solver's limit of fixed-point steps from z = 0), for timing f and its parts."""

    def __init__(self, s: ps.Setup) -> None:
        self.cell: Any = s.model.body.cell
        assert isinstance(self.cell, DEQTransformerCell)
        self.x, self.state = s.model.embed(s.x).detach(), s.state
        with torch.no_grad(), deq_core.cached_weights(self.cell):
            self.ctx = self.cell.setup(self.x, self.state)
            z = self.cell.initial(self.ctx)
            for _ in range(s.cfg.deq.max_iter):
                z = self.cell.f(z, self.ctx)
        self.z = z

    def set_fused(self, fused: bool) -> None:
        """Switch the attention's form and rebuild the context for it."""
        self.cell.block.attn.fused = fused
        with torch.no_grad(), deq_core.cached_weights(self.cell):
            self.ctx = self.cell.setup(self.x, self.state)

    def parts(self) -> dict[str, Callable[[Tensor], Tensor]]:
        """f and its parts as functions of their input (shapes as z): post-LN block, f(z) = LN2(h + FFN(h)) with
        h = LN1(z + Attn(z))."""
        block, ctx = self.cell.block, self.ctx.attention
        return {
            "f (whole call)": lambda z: self.cell.f(z, self.ctx),
            "attention": lambda z: block.attn.attend(z, ctx),
            "FFN": lambda z: block.ff2(torch.relu(block.ff1(z))),
            "norms, residuals, dropout": lambda z: block.ln2(z + block.drop_ff(block.ln1(z + block.drop_attn(z)))),
        }

    def forward_seconds(self, fn: Callable[[Tensor], Tensor], repeats: int) -> float:
        with torch.no_grad(), deq_core.cached_weights(self.cell):
            return median_seconds(lambda: fn(self.z), repeats)

    def vjp_seconds(self, fn: Callable[[Tensor], Tensor], repeats: int) -> float:
        """A vector-Jacobian product through fn's graph at z, the graph kept (as an adjoint solve does)."""
        with deq_core.cached_weights(self.cell):
            z = self.z.clone().requires_grad_()
            out = fn(z)
            probe = torch.randn_like(out)
            return median_seconds(lambda: torch.autograd.grad(out, z, probe, retain_graph=True), repeats)

    def setup_seconds(self, repeats: int) -> float:
        with torch.no_grad(), deq_core.cached_weights(self.cell):
            return median_seconds(lambda: self.cell.setup(self.x, self.state), repeats)

    def operator_table(self, rows: int = 8) -> list[list[str]]:
        """The operators taking the most CPU time in one call of f without autograd and in one vector-Jacobian
        product through it (torch.profiler, self time)."""
        f = self.parts()["f (whole call)"]
        with deq_core.cached_weights(self.cell):
            z = self.z.clone().requires_grad_()
            out = f(z)
            probe = torch.randn_like(out)
            with torch.no_grad():
                f(self.z)
            torch.autograd.grad(out, z, probe, retain_graph=True)
            with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as fwd:
                f(self.z)
            with profile(activities=[ProfilerActivity.CPU]) as bwd:
                torch.autograd.grad(out, z, probe, retain_graph=True)
        table = []
        for label, prof in (("f, no autograd", fwd), ("vector-Jacobian product", bwd)):
            events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            total = sum(e.self_cpu_time_total for e in events)
            for e in events[:rows]:
                share = e.self_cpu_time_total / total
                table.append([label, e.key, str(e.count), f"{e.self_cpu_time_total / 1e3:.1f}", lb.percent(share)])
        return table


def paired(before: Callable[[], float], after: Callable[[], float], repeats: int, warmup: bool = True) -> list[str]:
    """[median before, median after, median of the per-pair ratios before / after]: each callable measures and
    returns its own seconds; the two run next to each other ``repeats`` times (after one untimed pair: ``warmup``)."""
    if warmup:
        before(), after()
    pairs = [(before(), after()) for _ in range(repeats)]
    b, a = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    return [f"{b:.3f}", f"{a:.3f}", f"{statistics.median(x / y for x, y in pairs):.2f}x"]


def in_form(probe: CellProbe, fused: bool, measure: Callable[[], float]) -> Callable[[], float]:
    """``measure`` with the probe's attention in the fused or gathered form (switching, not timed, rebuilds the
    context)."""

    def run() -> float:
        probe.set_fused(fused)
        return measure()

    return run


def f_cases(probe: CellProbe) -> list[tuple[str, Callable[[], float]]]:
    """One call of f without autograd and one vector-Jacobian product through it, each measuring its CPU seconds."""
    f = probe.parts()["f (whole call)"]
    return [
        ("one call of f, no autograd (a solver iteration)", lambda: probe.forward_seconds(f, 1)),
        ("one vector-Jacobian product through f (an adjoint iteration)", lambda: probe.vjp_seconds(f, 1)),
    ]


def before_after(rep: lb.Report, name: str, overrides: Sequence[str], repeats: int) -> None:
    """Part 1: gathered against fused attention on the same model, batch and evaluation set."""
    s = ps.make_setup(name, overrides, CPU, seed=0)
    probe = CellProbe(s)
    steps: list[tuple[str, Callable[[], float]]] = [
        *f_cases(probe),
        ("training step, solving (forward and backward solves)", lambda: cpu_seconds(training_step(s, False))),
        (f"training step, pretraining (f unrolled {s.cfg.deq.pretrain_depth} times)",
         lambda: cpu_seconds(training_step(s, True))),
    ]  # fmt: skip
    rows = []
    for label, measure in steps:
        lb.note(f"{label} ...")
        rows.append([label, *paired(in_form(probe, False, measure), in_form(probe, True, measure), repeats)])
    label = f"evaluation of the validation set ({s.cfg.data.n_valid} sequences)"
    lb.note(f"{label} ...")

    def valid() -> float:
        return cpu_seconds(evaluation(s, "valid"))

    rows.append([label, *paired(in_form(probe, False, valid), in_form(probe, True, valid), 1, warmup=False)])
    cfg = s.cfg
    rep.add(f"### 1. Before and after: `{name}`, attention gathered vs fused")
    rep.add()
    rep.add(
        f"Batch {tuple(s.x.shape)} tokens; {cfg.deq.solver} {cfg.deq.max_iter} forward / {cfg.deq.backward_solver} "
        f"{cfg.deq.backward_max_iter} backward iterations (tol {cfg.deq.tol:g} / {cfg.deq.backward_tol:g}), "
        f"evaluation limit {cfg.deq.eval_max_iter}. CPU seconds, medians; ratio: median over pairs run next to each "
        f"other (the evaluation: one pair)."
    )
    rep.add()
    rep.table(["what", "gathered (s)", "fused (s)", "gathered / fused"], rows)


def other_sizes(rep: lb.Report, overrides: Sequence[str], repeats: int) -> None:
    """Part 1, continued: the two forms at the sizes of the other DEQ-Transformer presets (f only)."""
    rows = []
    for name in OTHER_SIZES:
        s = ps.make_setup(name, overrides, CPU, seed=0)
        probe, m = CellProbe(s), s.cfg.model
        memory = 0 if s.state is None else s.state[0].shape[1]  # (states, their injections)
        size = f"`{name}`: {tuple(s.x.shape)} tokens + {memory} of memory, width {m.d_model}, {m.n_heads} x {m.d_head}"
        for label, measure in f_cases(probe):
            lb.note(f"{name}: {label} ...")
            rows.append([size, label, *paired(in_form(probe, False, measure), in_form(probe, True, measure), repeats)])
    rep.add()
    rep.add("The same comparison of f at the other DEQ-Transformer presets' sizes (CPU seconds):")
    rep.add()
    rep.table(["preset and size", "what", "gathered (s)", "fused (s)", "gathered / fused"], rows)


def split_of_step(rep: lb.Report, name: str, overrides: Sequence[str], repeats: int) -> None:
    """Part 2: where the fused model's step and its f spend their time."""
    s = ps.make_setup(name, overrides, CPU, seed=0)
    probe = CellProbe(s)
    probe.set_fused(True)
    lb.note("parts of f ...")
    parts = []
    whole_fwd = whole_vjp = 0.0
    for label, fn in probe.parts().items():
        fwd, vjp = probe.forward_seconds(fn, repeats), probe.vjp_seconds(fn, repeats)
        if not parts:
            whole_fwd, whole_vjp = fwd, vjp
        parts.append([label, f"{1e3 * fwd:.1f}", lb.percent(fwd / whole_fwd), f"{1e3 * vjp:.1f}",
                      lb.percent(vjp / whole_vjp)])  # fmt: skip
    setup = probe.setup_seconds(repeats)
    parts.append(["segment setup (once per step: injection, positions, masks)", f"{1e3 * setup:.1f}",
                  lb.percent(setup / whole_fwd), "", ""])  # fmt: skip
    probe.set_fused(False)
    operators = [["gathered", *row] for row in probe.operator_table()]
    probe.set_fused(True)
    operators += [["fused", *row] for row in probe.operator_table()]
    lb.note("training step split ...")
    timer = StepTimer()
    original = deq_core.cached_weights
    ps.instrument(s, timer)
    try:
        prof = profile_steps(timer, training_step(s, False, timer), repeats)
    finally:
        deq_core.cached_weights = original
    rep.add()
    rep.add(f"### 2. Where the time goes: `{name}` with the fused attention")
    rep.add()
    rep.add(
        f"A training step that solves for the equilibrium, split by `lab.steptime.StepTimer` (wall time, medians of "
        f"{repeats} steps; the instrumented step: {prof.total:.2f} s):"
    )
    rep.add()
    rep.table(["part of the step", "ms", "share"], [row[:3] for row in split_rows(prof, 1.0)])
    inside = sum(prof.parts[k] for k in F_PARTS) / prof.total
    solvers = (prof.parts["forward solver"] + prof.parts["adjoint solver"]) / prof.total
    rep.add(
        f"f's own work ({prof.f_calls} calls of f, {prof.passes} backward passes through its graph): "
        f"{lb.percent(inside)} of the step; the two solvers' own work {lb.percent(solvers)}; the rest (embedding, "
        f"head, loss, weight norm, optimizer) {lb.percent(1 - inside - solvers)}."
    )
    rep.add()
    rep.add("One call of f and its parts, each timed alone (CPU ms, medians; shares of the whole call):")
    rep.add()
    rep.table(["part", "no autograd (ms)", "share", "vector-Jacobian product (ms)", "share"], parts)
    rep.add(
        "Operators taking the most CPU time in one call of f, with the gathered attention (before) and the fused one "
        "(torch.profiler, self time; share of the call's total):"
    )
    rep.add()
    rep.table(["attention", "call", "operator", "calls", "ms", "share"], operators)


def preset_costs(name: str, overrides: Sequence[str], repeats: int) -> dict[str, float]:
    """CPU seconds per training step (solving; pretraining for a DEQ with pretraining) and per evaluation."""
    s = ps.make_setup(name, overrides, CPU, seed=0)
    lb.note(f"{name} ...")
    costs = {"solve": median_seconds(training_step(s, False), repeats)}
    if s.cfg.is_deq and s.cfg.deq.pretrain_steps:
        costs["pretrain"] = median_seconds(training_step(s, True), repeats)
    costs["valid"] = cpu_seconds(evaluation(s, "valid"))
    costs["test"] = cpu_seconds(evaluation(s, "test"))
    costs["pretrain_steps"] = float(s.cfg.deq.pretrain_steps if s.cfg.is_deq else 0)
    return costs


def run_seconds(costs: dict[str, float], steps: int, eval_every: int) -> tuple[float, float]:
    """(seconds of the training steps, seconds of the evaluations) of a run: its pretraining and solving steps, a
    validation evaluation every ``eval_every`` steps and at the last, the test evaluation at the end (checkpoints and
    logging are not counted)."""
    pretrain = min(int(costs["pretrain_steps"]), steps)
    evaluations = steps // eval_every + (1 if steps % eval_every else 0)
    training = pretrain * costs.get("pretrain", costs["solve"]) + (steps - pretrain) * costs["solve"]
    return training, evaluations * costs["valid"] + costs["test"]


def run_hours(costs: dict[str, float], steps: int, eval_every: int) -> float:
    """Hours of a run (:func:`run_seconds`, both parts)."""
    return sum(run_seconds(costs, steps, eval_every)) / 3600


def budget_table(rep: lb.Report, overrides: Sequence[str], budgets: Sequence[tuple[int, int]], repeats: int) -> None:
    """Part 3: every preset's step and evaluation costs, and the hours of each budget."""
    costs = {name: preset_costs(name, overrides, repeats) for name in PRESETS}
    head = ["preset", "step, solving (s)", "step, pretraining (s)", "valid evaluation (s)", "test evaluation (s)"]
    head += [f"hours, {steps} steps, valid every {every}" for steps, every in budgets]
    rows = []
    for name, c in costs.items():
        pre = f"{c['pretrain']:.3f}" if "pretrain" in c else ""
        hours = [f"{run_hours(c, steps, every):.2f}" for steps, every in budgets]
        rows.append([f"`{name}`", f"{c['solve']:.3f}", pre, f"{c['valid']:.1f}", f"{c['test']:.1f}", *hours])
    rep.add()
    rep.add("### 3. The five presets: cost per step and per evaluation, hours per run")
    rep.add()
    rep.add(
        "CPU seconds on one thread (one step: medians; one evaluation: a single run). Hours: pretraining steps (the "
        "preset's count) at the pretraining cost, the other steps at the solving cost, a validation evaluation every "
        "`eval_every` steps and at the last, one test evaluation."
    )
    rep.add()
    rep.table(head, rows)
    slowest = max(costs, key=lambda name: run_hours(costs[name], *budgets[0]))
    shares = []
    for steps, every in budgets:
        training, evaluating = run_seconds(costs[slowest], steps, every)
        shares.append(f"{lb.percent(evaluating / (training + evaluating))} ({steps} steps, valid every {every})")
    rep.add(f"The evaluations' share of the slowest run (`{slowest}`): {', '.join(shares)}.")


def machine() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo) and the load average (other processes running beside this one)."""
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        lines = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        name = lines[0].split(":", 1)[1].strip() if lines else name
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cores = os.cpu_count()
    return f"CPU {name} ({cores} cores)" + ("" if load is None else f", load average {load[0]:.1f}")


def parse_budget(text: str) -> tuple[int, int]:
    steps, every = (int(part) for part in text.split(":"))
    if steps < 1 or every < 1:
        raise argparse.ArgumentTypeError(f"a budget is STEPS:EVAL_EVERY with both >= 1, got {text!r}")
    return steps, every


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 12, 4 sequences, one repetition")
    parser.add_argument("--steps", type=int, default=3, help="repetitions of each timed step")
    parser.add_argument("--budgets", nargs="+", type=parse_budget, default=[(15_000, 1000)], metavar="STEPS:EVERY")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of every preset")
    parser.add_argument("--out", default=None, help="also write the Markdown report to FILE")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.device != CPU:
        parser.error("the profile measures CPU time on one thread: use --device cpu")
    torch.set_num_threads(1)
    repeats = 1 if args.quick else args.steps
    overrides = [*(QUICK if args.quick else []), *args.set]
    deq_overrides = [*overrides, *(QUICK_DEQ if args.quick else [])]
    rep = lb.Report()
    rep.add("## Profile of the copy-memory runs at T = 400 on one CPU thread")
    rep.add()
    extra = deq_overrides[len(overrides) :]
    rep.add(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread; {machine()} at the start; overrides: "
        f"{' '.join(overrides) or 'none'}" + (f" (the DEQ-Transformer also {' '.join(extra)})" if extra else "") + "."
    )
    rep.add()
    before_after(rep, PRESETS[0], deq_overrides, repeats)
    other_sizes(rep, deq_overrides, repeats)
    split_of_step(rep, PRESETS[0], deq_overrides, repeats)
    budget_table(rep, overrides, args.budgets, repeats)
    rep.add()
    rep.add(f"At the end: {machine()}.")
    rep.write(args.out, lb.command_line("profile_copy400.py", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
