"""The solve's iterations as graphs, for a capturable solver (:attr:`~deq_core.Solver.capturable`) in a solve that
compiles: the loop's bookkeeping written as pure functions of tensors, traced by torch.compile together with the
solver's step.

- ``compile_step=True`` (:func:`iterate_compiled`): one graph per iteration, :func:`_between`: the statistics of the
  iterate f has just been evaluated at (:func:`assess`), the solver's step and the freezing of finished samples; f runs
  eagerly between two graphs. The graph writes the best iterate, the best residuals and the solver's state over their
  buffers (inductor does it in place: Anderson's step writes the slot of its history, not a copy of it).
- ``capture=True`` (:func:`iterate_captured`): one graph for the iterations between two host checks (or up to an
  iterate kept for ``states_at``, or max_iter), :func:`_chunk`: step, freezing, f and statistics, repeated; pure (new
  tensors out), so that on CUDA it is replayed as a CUDA graph (``mode="reduce-overhead"``, whose outputs are copied
  before the next replay overwrites them). The first iteration (f at z0, its statistics) runs eagerly, and f's output
  is checked there.

Both give the iterates of the eager loop up to rounding (the same operations, fused), the same calls of f, the same
checks on the host (``check_every``), hence the same NFE, iterations and per-sample results: in :func:`_between` one
step more is computed after the iterate that ends the solve and then dropped (no call of f). The statistics are
those of :meth:`~deq_core._solvers._run.SolveRun._record` (which writes them into its buffers for the eager loop's
operation count); ``tests/test_compile_step.py`` compares the two.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from .base import Loop

if TYPE_CHECKING:
    from ._run import SolveRun
    from .base import Solver


class Progress(NamedTuple):
    """Where each sample of a solve stands, on the device: ``best`` (2, B, D) f(z) and z of its best iterate,
    ``best_residual`` (B, 1) (NaN once it failed), ``active`` (B, 1) bool (still iterating)."""

    best: Tensor
    best_residual: Tensor
    active: Tensor


class Rule(NamedTuple):
    """How residuals are measured and compared with tol: ``stop_mode`` "rel" / "abs", ``stop_over`` "sample" /
    "batch" (see :func:`deq_core.solve`). Constants of a graph; tol is a tensor, so that a new tol compiles nothing."""

    stop_mode: str
    stop_over: str


def assess(z: Tensor, fz: Tensor, progress: Progress, tol: Tensor, rule: Rule) -> tuple[Tensor, Tensor, Progress,
                                                                                        Tensor | None]:  # fmt: skip
    """The statistics of the iterate z (B, D) with f(z) = fz: (g = fz - z, its residual (B, 1), the new standing, the
    batch's residual (0-d) with ``stop_over="batch"``, else None). As :meth:`SolveRun._record`: the residual is NaN
    where f(z) holds a NaN or Inf (the sample fails), ||f(z)|| is taken at least the smallest normal number ("rel")."""
    g = fz - z
    g_norm = torch.linalg.vector_norm(g, dim=1, keepdim=True)
    f_norm = torch.linalg.vector_norm(fz, dim=1, keepdim=True)
    if rule.stop_mode == "rel":
        f_norm = f_norm.clamp_min(torch.finfo(z.dtype).tiny)
        residual = g_norm / f_norm
    else:
        residual = torch.remainder(g_norm, torch.finfo(z.dtype).max)  # inf -> NaN, finite values unchanged
    better = residual < progress.best_residual  # False for NaN
    best_residual = torch.minimum(progress.best_residual, residual)  # NaN for a failed sample, from now on
    best = torch.where(better, torch.stack((fz, z)), progress.best)
    batch = None
    if rule.stop_over == "batch":  # as SolveRun._batch_active: one norm over the finite samples
        finite = best_residual == best_residual
        norms = torch.linalg.vector_norm(torch.where(finite, torch.stack((g_norm, f_norm)), 0.0), dim=(1, 2))
        batch = (norms[0] / norms[1]).nan_to_num(nan=0.0) if rule.stop_mode == "rel" else norms[0]
        active = finite & (batch > tol) & progress.active
    else:
        active = best_residual > tol
    return g, residual, Progress(best, best_residual, active), batch


def _between(
    z: Tensor, fz: Tensor, progress: Progress, tol: Tensor, rule: Rule, solver: Solver, state: Any, loop: Loop
) -> tuple[Tensor, Tensor | None, Tensor]:  # fmt: skip
    """Everything between two calls of f: the statistics of z (B, D) and fz, the solver's step and the next iterate
    with finished samples frozen, written over z (where f reads it next). Writes the standing's best iterate and
    residuals and the solver's state over their tensors; returns (residual (B, 1), the batch's residual or None, the
    active flags (B, 1))."""
    g, residual, new, batch = assess(z, fz, progress, tol, rule)
    step = solver.step(state, z, fz, g, loop)
    z_next = torch.where(new.active, step.z, new.best[1])
    progress.best.copy_(new.best)
    progress.best_residual.copy_(new.best_residual)
    if state is not None:
        for old, value in zip(state, step.state):
            old.copy_(value)
    z.copy_(z_next)
    return residual, batch, new.active


def _chunk(
    n: int, fn: Callable[[Tensor], Tensor], z: Tensor, fz: Tensor, g: Tensor, progress: Progress, tol: Tensor,
    rule: Rule, solver: Solver, state: Any, loop: Loop,
) -> tuple[Tensor, Tensor, Tensor, Progress, Any, list[Tensor], list[Tensor]]:  # fmt: skip
    """``n`` iterations from the iterate z (B, D) with f(z) = fz, g = fz - z, statistics recorded: each a step of the
    solver, the finished samples frozen, f and the statistics. Returns the last iterate's z, fz, g, the standing, the
    solver's state, and the residuals (B, 1) (and the batch's, 0-d, with ``stop_over="batch"``) of each iteration."""
    residuals, batches = [], []
    for _ in range(n):
        step = solver.step(state, z, fz, g, loop)
        state = step.state
        z = torch.where(progress.active, step.z, progress.best[1])
        fz = fn(z)
        g, residual, progress, batch = assess(z, fz, progress, tol, rule)
        residuals.append(residual)
        if batch is not None:
            batches.append(batch)
    return z, fz, g, progress, state, residuals, batches


def _settings(run: SolveRun, z: Tensor) -> tuple[Tensor, Rule]:
    return torch.tensor(run.tol, dtype=z.dtype, device=z.device), Rule(run.stop_mode, run.stop_over)


def _configuration(solver: Solver, rule: Rule, z: Tensor, state: Any) -> tuple[Hashable, ...]:
    """What a graph of the loop depends on besides its tensors' values: the solver (its settings, when it is
    hashable as a frozen dataclass is), the rule, the state's shape, dtype and device, the solver state's structure
    and tensors, and whether autocast is on."""
    try:
        solver_key: Hashable = (type(solver), hash(solver), solver)
    except TypeError:  # an unhashable solver: a graph per object
        solver_key = (type(solver), id(solver))
    tensors = () if state is None else tuple((tuple(t.shape), t.dtype, t.stride()) for t in state)
    autocast = torch.is_autocast_enabled(z.device.type)
    return (solver_key, rule, tuple(z.shape), z.dtype, z.device, type(state), tensors, autocast)


def iterate_compiled(solver: Solver, run: SolveRun) -> None:
    """``compile_step=True``: f eagerly, everything between two of its calls as one graph (:func:`_between`), traced
    once per configuration and called without dynamo (:meth:`~._compile.Compiler.traced`). f reads the iterate from a
    buffer the graph writes and writes its result into another (:meth:`~deq_core._state.FlatMap.bind`): the graph's
    inputs are the loop's own tensors, of fixed layout."""
    loop = Loop(run)
    z, fz = run.x0.clone(), torch.empty_like(run.x0)
    call_f = run.fn.bind(z, fz)
    run.nfe += 1
    call_f()
    state = solver.init(z, fz, fz - z, loop)
    tol, rule = _settings(run, z)
    kind = None if state is None else type(state)
    between = run.compiler.traced(lambda: _flat_between(rule, solver, loop, kind), _configuration(solver, rule, z,
                                                                                                    state))  # fmt: skip
    state_tensors = () if state is None else tuple(state)
    while True:
        residual, run.active, *batch = between(z, fz, run._best, run.best_residual, run.active, tol, *state_tensors)
        run.record((residual,), batch)
        if run.finished:
            return
        run.nfe += 1
        call_f()


def _flat_between(rule: Rule, solver: Solver, loop: Loop, kind: type | None) -> Callable[..., tuple[Tensor, ...]]:
    """:func:`_between` as a function of tensors only: (z, fz, best, best_residual, active, tol, *the solver state's
    tensors) -> (residual, active[, the batch's residual])."""

    def between(z: Tensor, fz: Tensor, best: Tensor, best_residual: Tensor, active: Tensor, tol: Tensor,
                *state_tensors: Tensor) -> tuple[Tensor, ...]:  # fmt: skip
        state = None if kind is None else _rebuilt(kind, state_tensors)
        residual, batch, active = _between(z, fz, Progress(best, best_residual, active), tol, rule, solver, state,
                                           loop)  # fmt: skip
        return (residual, active) if batch is None else (residual, active, batch)

    return between


def _rebuilt(kind: type, tensors: tuple[Tensor, ...]) -> Any:
    """A solver state of type ``kind`` (a NamedTuple or a tuple) from its tensors."""
    return kind(*tensors) if hasattr(kind, "_fields") else kind(tensors)


def iterate_captured(solver: Solver, run: SolveRun) -> None:
    """``capture=True``: the first iteration eagerly, then the iterations up to each host check as one graph with f
    (:func:`_chunk`)."""
    loop = Loop(run)
    z = run.x0.clone()
    fz = run.call(z)
    tol, rule = _settings(run, z)
    g, residual, progress, batch = assess(z, fz, run.progress, tol, rule)
    run.settle(progress)
    run.record((residual,), () if batch is None else (batch,))
    state = solver.init(z, fz, g, loop)
    configuration = _configuration(solver, rule, z, state) + (getattr(run.fn.f, "__code__", type(run.fn.f)),)
    owned = z.device.type == "cuda"  # a CUDA graph's outputs are overwritten by its next replay: keep copies
    while not run.finished:
        n = run.next_stop() - run.iterations
        chunk = run.compiler.graph(_chunk, configuration + (n,), z.device)
        out = _traced(chunk, "capture", n, run.fn, z, fz, g, run.progress, tol, rule, solver, state, loop)
        z, fz, g, progress, state, residuals, batches = _copied(out) if owned else out
        run.nfe += n
        run.settle(progress)
        run.record(residuals, batches)


def _traced(graph: Callable[..., Any], flag: str, *args: Any) -> Any:
    """``graph(*args)``; a step (or, with capture=True, f) that torch.compile cannot trace as one graph is a one-line
    RuntimeError saying so."""
    try:
        return graph(*args)
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as error:  # a graph break, a host read
        first = (str(error).strip().splitlines() or [""])[0]
        what = "f or the solver's step" if flag == "capture" else "the solver's step"
        raise RuntimeError(
            f"{flag}=True: torch.compile cannot trace {what} as one graph ({first[:200]}); make it traceable "
            f"(no .item(), no Python branch on a tensor's value, no print) or pass {flag}=False."
        ) from None


def _copied(tree: Any) -> Any:
    """``tree`` (tensors in tuples, NamedTuples and lists) with every tensor copied."""
    if isinstance(tree, Tensor):
        return tree.clone()
    if isinstance(tree, list):
        return [_copied(item) for item in tree]
    if isinstance(tree, tuple):
        items = [_copied(item) for item in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return tree
