"""End to end: training steps of the same models with deq-core's ``DEQ`` and with TorchDEQ 0.1.0's ``get_deq``.

Run: ``python packages/deq-core/benchmarks/end_to_end.py [--quick] [--out FILE] [--steps N] [--device cpu]``.

Models (``_e2e_models.py``, self-contained mirrors of the task packages' DEQs): ``conv`` (MDEQ-like, two resolutions,
GroupNorm), ``transformer`` (a DEQ-Transformer layer: attention + FFN + LayerNorm), ``gru`` (deq-toy's GRU-cell
DEQ) and ``quickstart`` (the quickstart example's tanh layer, D = 64, batch 256). Each model is built once; two
copies with identical weights are trained, one through each library, with the same optimizer (Adam, lr 1e-3) on the
same batches (a cycle of 4 random batches).

Settings, identical for both libraries, for each forward/backward solver pair (Anderson/Anderson, Broyden/Broyden):
forward max_iter 30, tol 1e-3 (relative residual); implicit backward (TorchDEQ: ``ift=True``) max_iter 30, tol 1e-4
(relative); Anderson m = 6 both ways in both (TorchDEQ's default m, tau = 1 and lam = 1e-4; ours m = 6, beta 1, its
default reg); Broyden with each library's defaults (TorchDEQ keeps every update up to max_iter, ours its default
memory). deq-core with ``warn_unconverged="never"`` (TorchDEQ does not warn).

A training step = forward (solve + the tracked call of f), loss, backward (the implicit backward's solve), optimizer
step. Per model and solver, after 2 warm-up steps per library, ``--steps`` timed steps per library (20; --quick: 3),
ours and TorchDEQ's alternating (which goes first alternates too). Reported:

- time ours / TorchDEQ: the median of the per-pair ratios (the two steps of a pair run next to each other, so the
  machine's load changes both alike); the median milliseconds per step of each, for scale only;
- NFE per step (medians), counted by a wrapper around f, not taken from the libraries' reports: forward = calls of f
  without autograd (the forward solver's); backward = gradients w.r.t. the state computed through f (a tensor hook on
  f's input: the backward solver's vector-Jacobian products, plus, for deq-core, the gradient that the final backward
  pass also computes w.r.t. its detached z*); "f with autograd" = calls of f with autograd (deq-core: the tracked call;
  TorchDEQ: the tracked call and the recomputation of f(z*) in its backward);
- residuals (medians over the timed steps of the largest in the batch): forward = ||f(z*) - z*|| / ||f(z*)|| recomputed
  from the tracked call (z* is what each library passes to it); backward = the relative residual each library reports
  for its adjoint solve (deq-core: ``info.backward.residual``; TorchDEQ: ``rel_lowest`` through ``backward_writer``);
- peak memory of one more training step (forward + backward + optimizer step) per library, not timed: on CPU the largest
  total of tensor storages created during the step and alive at once (``deq_core.peak_live_bytes``, a
  TorchDispatchMode that sees every ATen op's outputs; the parameters, the optimizer state and the batch exist before
  the step and are not counted, the gradients are (set to None before each step)); on CUDA
  ``torch.cuda.max_memory_allocated`` during the step minus what was allocated before it;
- the training loss after the last step of each (both see the same batches);
- same-computation check, per model: from the same weights and batch, in float64, with Broyden both ways converged
  tightly in both libraries (tol 1e-10, up to 200 iterations each way), the largest difference between the two
  libraries' parameter gradients relative to the largest gradient entry. (Broyden: TorchDEQ's Anderson, whose
  regularization lam = 1e-4 is not scaled to the residuals, stalls above 1e-10 in its backward solve.)
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import _e2e_models as M
import torch
from torch import Tensor, nn

import deq_core
import problems as P

MODELS = ("conv", "transformer", "gru", "quickstart")
SOLVERS = ("anderson", "broyden")
N_BATCHES = 4
WARMUP = 2
MIB = 2.0**20
State = tuple[Tensor, ...]


@dataclass(frozen=True)
class Limits:
    f_max_iter: int = 30
    f_tol: float = 1e-3
    b_max_iter: int = 30
    b_tol: float = 1e-4


TRAINING = Limits()
TIGHT = Limits(200, 1e-10, 200, 1e-10)  # the same-computation check, in float64


# --------------------------------------------------------------------------------------------------------------------
# counting the work done through f


class Meter:
    """Counts, during one training step, the calls of f without and with autograd and the gradients w.r.t. the state
    computed through f; keeps the relative residual of the first call with autograd (the tracked call at z*)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.autograd_calls = 0
        self.vjps = 0
        self.residual: Tensor | None = None

    def _vjp(self, grad: Tensor) -> None:
        self.vjps += 1

    def __call__(self, f: Callable[[State], State], z: State) -> State:
        if not torch.is_grad_enabled():
            self.calls += 1
            return f(z)
        self.autograd_calls += 1
        first = next((t for t in z if t.requires_grad), None)
        if first is not None:
            first.register_hook(self._vjp)
        out = f(z)
        if self.residual is None:
            with torch.no_grad():
                diff = torch.cat([(o - t).flatten(1) for o, t in zip(out, z)], dim=1)
                full = torch.cat([o.flatten(1) for o in out], dim=1)
                self.residual = diff.norm(dim=1) / full.norm(dim=1)
        return out


# --------------------------------------------------------------------------------------------------------------------
# the two libraries, behind one call: (f on tuple states, z0) -> f(z*) as a tuple, with gradients


class Ours:
    """deq-core's ``DEQ`` layer."""

    name = "deq-core"

    def __init__(self, solver: str, limits: Limits) -> None:
        def make() -> deq_core.Solver:
            return deq_core.Anderson(m=6) if solver == "anderson" else deq_core.Broyden()

        self.deq = deq_core.DEQ(
            solver=make(),
            max_iter=limits.f_max_iter,
            tol=limits.f_tol,
            stop_mode="rel",
            backward=deq_core.Implicit(make(), max_iter=limits.b_max_iter, tol=limits.b_tol, stop_mode="rel"),
            warn_unconverged="never",
        )
        self.info: deq_core.DEQInfo | None = None

    def __call__(self, f: Callable[[State], State], z0: State) -> State:
        z, self.info = self.deq(f, z0)
        assert isinstance(z, tuple)
        return z

    def backward_residual(self) -> float:
        assert self.info is not None and self.info.backward is not None
        return float(self.info.backward.residual.max())


class TorchDEQ:
    """TorchDEQ 0.1.0's ``get_deq(ift=True)`` (its default core; one state, so "sliced" and "indexing" coincide)."""

    name = "TorchDEQ"

    def __init__(self, solver: str, limits: Limits) -> None:
        from torchdeq import get_deq

        self.deq = get_deq(
            f_solver=solver,
            b_solver=solver,
            f_max_iter=limits.f_max_iter,
            b_max_iter=limits.b_max_iter,
            f_tol=limits.f_tol,
            b_tol=limits.b_tol,
            f_stop_mode="rel",
            b_stop_mode="rel",
            ift=True,
        )
        self.kwargs = {"m": 6} if solver == "anderson" else {}
        self._backward: float = float("nan")

    def _writer(self, info: dict) -> None:
        self._backward = float(info["rel_lowest"].max())

    def __call__(self, f: Callable[[State], State], z0: State) -> State:
        self.deq.train()
        if len(z0) == 1:
            out, _ = self.deq(lambda z: f((z,))[0], z0[0], solver_kwargs=self.kwargs, backward_writer=self._writer)
            return (out[-1],)
        out, _ = self.deq(lambda *zs: list(f(zs)), list(z0), solver_kwargs=self.kwargs, backward_writer=self._writer)
        return tuple(out[-1])

    def backward_residual(self) -> float:
        return self._backward


Library = Ours | TorchDEQ


# --------------------------------------------------------------------------------------------------------------------
# training


@dataclass
class Record:
    """What one library's timed steps measured (one entry per step)."""

    seconds: list[float] = field(default_factory=list)
    nfe: list[int] = field(default_factory=list)
    vjps: list[int] = field(default_factory=list)
    autograd_calls: list[int] = field(default_factory=list)
    residual: list[float] = field(default_factory=list)
    backward_residual: list[float] = field(default_factory=list)
    loss: float = float("nan")
    peak: float = float("nan")


class Trainer:
    """One copy of a model trained through one library."""

    def __init__(self, model: nn.Module, library: Library) -> None:
        self.model, self.library = model, library
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.meter = Meter()
        self.record = Record()

    def step(self, batch: tuple[Tensor, Tensor]) -> float:
        """One training step; returns the loss."""
        model, meter = self.model, self.meter
        meter.reset()
        self.opt.zero_grad(set_to_none=True)
        ctx, z0 = model.prepare(batch[0])
        z = self.library(lambda s: meter(lambda t: model.f(t, ctx), s), z0)
        loss = model.loss(z, batch[1])
        loss.backward()
        self.opt.step()
        return loss.item()

    def timed_step(self, batch: tuple[Tensor, Tensor], device: torch.device) -> None:
        synchronize(device)
        start = time.perf_counter()
        loss = self.step(batch)  # float(loss) waits for the forward; the synchronize below for the rest
        synchronize(device)
        rec, meter = self.record, self.meter
        rec.seconds.append(time.perf_counter() - start)
        rec.nfe.append(meter.calls)
        rec.vjps.append(meter.vjps)
        rec.autograd_calls.append(meter.autograd_calls)
        rec.residual.append(float(meter.residual.max()) if meter.residual is not None else float("nan"))
        rec.backward_residual.append(self.library.backward_residual())
        rec.loss = loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of the tensors created by ``fn`` (see the module docstring for CPU and CUDA)."""
    if device.type != "cuda":
        return deq_core.peak_live_bytes(fn)[1]
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start


def make_batches(model: nn.Module, sizes: M.Sizes, seed: int, device: torch.device) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(seed + 101)
    return [tuple(t.to(device) for t in model.batch(sizes, gen)) for _ in range(N_BATCHES)]  # type: ignore[misc]


def trainers(name: str, solver: str, quick: bool, seed: int, device: torch.device) -> tuple[list[Trainer], list]:
    """Two copies of model ``name`` with the same weights, one through deq-core and one through TorchDEQ, after
    ``WARMUP`` steps each; and the batches."""
    model, sizes = M.build(name, quick, seed)
    batches = make_batches(model, sizes, seed, device)
    pair = [
        Trainer(copy.deepcopy(model).to(device), Ours(solver, TRAINING)),
        Trainer(copy.deepcopy(model).to(device), TorchDEQ(solver, TRAINING)),
    ]
    for i in range(WARMUP):
        for t in pair:
            t.step(batches[i % N_BATCHES])
    return pair, batches


def compare(name: str, solver: str, steps: int, quick: bool, seed: int, device: torch.device) -> list[Record]:
    """Train two copies of model ``name`` through deq-core and TorchDEQ, interleaved; their records."""
    pair, batches = trainers(name, solver, quick, seed, device)
    for i in range(steps):
        batch = batches[(WARMUP + i) % N_BATCHES]
        for t in pair if i % 2 == 0 else pair[::-1]:
            t.timed_step(batch, device)
    batch = batches[(WARMUP + steps) % N_BATCHES]
    for t in pair:
        t.record.peak = peak_bytes(lambda t=t: t.step(batch), device)
    return [t.record for t in pair]


def peak_ratios(quick: bool, seed: int, device: torch.device) -> dict[str, float]:
    """Peak memory of a training step, ours / TorchDEQ, for every model and solver (as ``compare`` measures it after
    the warm-up steps, without the timed ones), by "model / solver"."""
    ratios = {}
    for name in MODELS:
        for solver in SOLVERS:
            pair, batches = trainers(name, solver, quick, seed, device)
            batch = batches[WARMUP % N_BATCHES]
            ours, tdeq = (peak_bytes(lambda t=t, batch=batch: t.step(batch), device) for t in pair)
            ratios[f"{name} / {solver}"] = ours / tdeq
    return ratios


def gradients(model: nn.Module, library: Library, batch: tuple[Tensor, Tensor]) -> list[Tensor]:
    """The parameter gradients of one forward + backward (no optimizer step)."""
    model.zero_grad(set_to_none=True)
    ctx, z0 = model.prepare(batch[0])
    model.loss(library(lambda s: model.f(s, ctx), z0), batch[1]).backward()
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def gradient_agreement(name: str, quick: bool, seed: int, device: torch.device, solver: str = "broyden") -> float:
    """max |g_ours - g_TorchDEQ| / max |g_ours| over all parameters, in float64 with tight solves (``TIGHT``)."""
    model, sizes = M.build(name, quick, seed)
    model = model.double().to(device)
    batch = tuple(t.double() if t.is_floating_point() else t for t in make_batches(model, sizes, seed, device)[0])
    ours = gradients(model, Ours(solver, TIGHT), batch)  # type: ignore[arg-type]
    theirs = gradients(model, TorchDEQ(solver, TIGHT), batch)  # type: ignore[arg-type]
    scale = max(float(g.abs().max()) for g in ours)
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs)) / scale


# --------------------------------------------------------------------------------------------------------------------
# report


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pair(a: float, b: float, fmt: Callable[[float], str] = P.fmt) -> str:
    return f"{fmt(a)} / {fmt(b)}"


def row(name: str, solver: str, ours: Record, tdeq: Record) -> list[str]:
    ratio = P.median_ratio(ours.seconds, tdeq.seconds)
    return [
        name, solver, P.fmt(ratio), pair(1e3 * med(ours.seconds), 1e3 * med(tdeq.seconds)),
        pair(med(ours.nfe), med(tdeq.nfe)), pair(med(ours.vjps), med(tdeq.vjps)),
        pair(med(ours.autograd_calls), med(tdeq.autograd_calls)),
        pair(med(ours.residual), med(tdeq.residual), P.sci), pair(med(ours.backward_residual),
        med(tdeq.backward_residual), P.sci), pair(ours.peak / MIB, tdeq.peak / MIB), P.fmt(ours.peak / tdeq.peak),
        pair(ours.loss, tdeq.loss),
    ]  # fmt: skip


HEADER = [
    "model", "solver", "time ours/TorchDEQ", "ms per step ours / TorchDEQ", "fwd NFE ours / TorchDEQ",
    "bwd VJPs ours / TorchDEQ", "f with autograd ours / TorchDEQ", "fwd residual ours / TorchDEQ",
    "bwd residual ours / TorchDEQ", "peak MiB ours / TorchDEQ", "peak ours/TorchDEQ", "final loss ours / TorchDEQ",
]  # fmt: skip


def run(
    models: Sequence[str], steps: int, quick: bool, seed: int, device: torch.device
) -> tuple[list[list[str]], dict[str, float]]:
    """The table rows (every model with every solver pair) and each model's gradient difference."""
    rows, grad_diffs = [], {}
    for name in models:
        for solver in SOLVERS:
            start = time.perf_counter()
            ours, tdeq = compare(name, solver, steps, quick, seed, device)
            rows.append(row(name, solver, ours, tdeq))
            P.note(f"{name} {solver}: {time.perf_counter() - start:.1f} s")
        grad_diffs[name] = gradient_agreement(name, quick, seed, device)
    return rows, grad_diffs


def main(argv: list[str] | None = None) -> int:
    parser = P.parser(__doc__ or "")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per library (default 20; --quick: 3)")
    args = parser.parse_args(argv)
    P.setup_torch(args.threads)
    from importlib.metadata import version

    steps = args.steps or (3 if args.quick else 20)
    rep = P.Report()
    rep.add(f"## End to end: training steps with deq-core {deq_core.__version__} vs TorchDEQ {version('torchdeq')}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s), float32, "
        f"{steps} timed steps per library after {WARMUP} warm-up steps, interleaved"
        f"{' (--quick: small batches)' if args.quick else ''}. Forward max_iter {TRAINING.f_max_iter}, tol "
        f"{TRAINING.f_tol:g}; backward max_iter {TRAINING.b_max_iter}, tol {TRAINING.b_tol:g} (relative). Time = "
        "median of per-pair ratios; NFE, VJPs and residuals are medians per step; peak = one extra step."
    )
    rep.add()
    rows, grad_diffs = run(MODELS, steps, args.quick, args.seed, args.device)
    rep.table(HEADER, rows)
    rep.add(
        "Same computation (float64, Broyden both ways, tol 1e-10, same weights and batch): parameter gradients of the "
        "two libraries differ by at most "
        + ", ".join(f"{P.sci(d)} ({name})" for name, d in grad_diffs.items())
        + " of the largest gradient entry."
    )
    rep.add()
    ratios = [float(r[2]) for r in rows]
    rep.add(
        f"Geometric mean of the time ratios: {P.fmt(statistics.geometric_mean(ratios))}; target <= 0.8: "
        f"{'met' if max(ratios) <= 0.8 else 'not met'} on {sum(r <= 0.8 for r in ratios)} of {len(ratios)} rows."
    )
    peaks = [float(r[10]) for r in rows]
    worst = max(range(len(rows)), key=lambda i: peaks[i])
    rep.add(
        f"- Peak memory of a training step at or below TorchDEQ's on every model and solver: "
        f"{'MET' if max(peaks) <= 1.0 else 'NOT MET'} (ours / TorchDEQ {P.fmt(min(peaks))} to {P.fmt(max(peaks))}, "
        f"the largest on {rows[worst][0]} / {rows[worst][1]})."
    )
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
