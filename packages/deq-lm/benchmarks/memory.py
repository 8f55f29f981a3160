"""Training memory of each sequence DEQ against its explicit twin, the DEQ paper's protocol (Tables 2-3).

    python packages/deq-lm/benchmarks/memory.py [--quick] [--out FILE] [--iters 2,4] [--depths 4,8,16,18,32]

Protocol: one training step (forward, loss, backward) on a segment of ``--tgt-len`` 150 positions and a batch of
``--batch`` 15, with the preset's memory (``mem_len``; TrellisNet: its convolution history) filled by earlier segments
run first, in training mode (dropout on), embeddings and softmax excluded.

What is measured, and why the body: the step runs the body alone, from the embedded input x (B, L, d_in) to the
hidden states (B, L, d_model), with loss = sum(hidden * R) for a fixed random R (B, L, d_model), excluded like the
input: the loss saves nothing of the body's and sends a generic gradient back (the plain mean of the hidden states
would not: post-LN layers map a constant gradient to zero). The paper excludes the embedding and the softmax; measuring
the whole model and subtracting their tensors would need to tell their storages apart from the body's inside a shared
autograd graph (the adaptive softmax, tied to the embedding, saves views of the same tables), while the body is
exactly the part that differs between a DEQ and its twin. The input x, the memory carried from the previous segment,
the parameters and their weight-normalized copies (parameter-sized, computed once per step before the body runs) are
excluded: they exist whatever the depth; the body's parameter bytes are listed apart.

Measured, in MiB (2^20 bytes):

- saved: the bytes of the distinct storages autograd saves for backward during the step
  (``deq_core.saved_tensor_bytes``): the activation memory. For a DEQ that is one tracked call f(z*) (and, with the
  Jacobian term, the graph of its vector-Jacobian product), whatever the number of solver iterations.
- step peak: the largest total of tensor storages created during the step and alive at once
  (``deq_core.peak_live_bytes``): saved activations plus temporaries, the DEQ's forward solver buffers (Anderson or
  Broyden histories) and its adjoint (backward) solve, and the input's gradient; parameter gradients exist before the
  step and are accumulated in place, so they are not counted. On CUDA this column is
  ``torch.cuda.max_memory_allocated`` during the step minus what was allocated before it.
- solve peak (DEQ): the same peak for the forward pass under no_grad: the solver's buffers plus f's temporaries.

CPU feasibility: the explicit twins are built on the meta device (tensors with shapes and no values; every count
above needs only shapes, and the tests check that meta and CPU give identical bytes). A DEQ's solve depends on values,
so DEQs run on the CPU at the paper widths but with the forward and backward iteration limits of ``--iters`` (2 and
4; tolerance 1e-12, so that every iteration runs) instead of the presets' 12-45. The table of the limits shows that
the saved bytes are identical at every limit and the peaks nearly so: Anderson allocates its whole history at the start
(2 (m - 1) = 14 vectors of the state's size), Broyden memory + 1 = 21 directions at the start and, from its first rank
reduction on (after ``memory`` = 20 updates, iteration 22), 2 (memory // 2) = 20 more for the reduced base; so the DEQs
of ``--extra-for`` are also measured at ``--extra-limit`` 22 iterations: both DEQ-TrellisNets (Broyden forward, where it
raises the peak) and the small
DEQ-Transformer, whose solvers (Anderson forward, Broyden backward) are those of the medium ones, which take 2-5 minutes
each at 22 iterations on one CPU thread. The main table uses each DEQ's largest measured limit. With ``--device cuda``
(default cpu) every model runs on the GPU with its preset's limits.

The twin's depth sweep (``--depths``, plus each preset's own depth) shows its saved bytes growing linearly with depth
while the DEQ's stay constant. ``--quick``: the presets' ``tiny-*`` versions (widths 8-16, memory 8, twin depths 2-3),
limits 2, 3 (and 22 for ``--extra-for``), depths 2, 4, 8: a smoke run of every code path in seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import _lm_bench as lb
import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

import deq_core
from deq_core.train.cli import add_device_argument
from deq_core.train.deq_config import deq_settings
from deq_core.train.run_config import replace_config
from deq_lm.configs import Config, get_config
from deq_lm.models.factory import build_body
from deq_lm.models.heads import build_embedding_and_head, embedding_width
from deq_lm.models.interface import BodyOutput

T = TypeVar("T")
# DEQs also measured past Broyden's memory (cheap at paper widths; the medium DEQ-Transformers share the small one's
# solvers).
EXTRA_FOR = ("wt103-deq-transformer-small", "wt103-deq-trellisnet", "ptb-deq-trellisnet")
TINY_TOL = 1e-12  # forward and backward tolerance of the DEQs measured on CPU: every iteration up to the limit runs


@dataclass(frozen=True)
class Pair:
    """A DEQ preset, its explicit twin's preset, and the published memory of both (GB, the paper's protocol)."""

    deq: str
    twin: str
    paper_deq_gb: float
    paper_twin_gb: float
    source: str
    jacobian: bool = False  # the DEQ's step includes the Jacobian regularization term (weight: the preset's)

    @property
    def deq_label(self) -> str:
        return self.deq + (" + JR" if self.jacobian else "")


PAIRS: tuple[Pair, ...] = (
    Pair("wt103-deq-transformer-small", "wt103-transformer-xl-small-4", 1.1, 4.8, "DEQ Table 3"),
    Pair("wt103-deq-transformer-small", "wt103-transformer-tied-16", 1.1, 6.8, "DEQ Table 3"),
    Pair("wt103-deq-transformer-medium", "wt103-transformer-xl-medium-16", 2.7, 8.5, "DEQ Table 3"),
    Pair("wt103-deq-transformer-medium-adaptive", "wt103-transformer-xl-medium-18-adaptive", 3.7, 9.0, "DEQ Table 3"),
    Pair("wt103-deq-transformer-postln-jr", "wt103-transformer-xl-medium-18-adaptive", 3.9, 9.0, "JR Table 5"),
    Pair("wt103-deq-transformer-postln-jr", "wt103-transformer-xl-medium-18-adaptive", 4.8, 9.0, "JR Table 5", True),
    Pair("wt103-deq-trellisnet", "wt103-trellisnet-70", 3.3, 24.7, "DEQ Table 3 (70 layers with checkpointing: 5.2)"),
    Pair("ptb-deq-trellisnet", "ptb-trellisnet-60", 1.2, 8.5, "DEQ Table 2"),
)


@dataclass(frozen=True)
class Protocol:
    """Sizes of the measured step and where each kind of model runs."""

    tgt_len: int = 150  # positions per segment
    batch: int = 15  # sequences per batch
    device: torch.device = torch.device("cpu")  # where DEQs run (and twins on CUDA)
    twin_device: torch.device = torch.device("meta")  # where explicit twins run
    iters: tuple[int, ...] = (2, 4)  # DEQ iteration limits (forward = backward); () = the presets' own
    extra_limit: int = 0  # one more limit (0: none) for the DEQ presets of ``extra_for``
    extra_for: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class BodyMemory:
    """One measured training step of a body. Bytes; NFE only for DEQs."""

    saved: int  # storages saved for backward (activations)
    step_peak: int  # peak live bytes of forward + backward (CUDA: max_memory_allocated above the start)
    params: int  # bytes of the body's parameters
    solve_peak: int | None = None  # DEQ: peak live bytes of the forward under no_grad
    nfe: tuple[int, int | None] | None = None  # DEQ: (forward, backward) calls of f in the step
    histories: tuple[int, int] | None = None  # DEQ: bytes of the forward and the backward solver's history buffers


# --------------------------------------------------------------------------------------------------------------------
# building


def body_input_width(cfg: Config) -> int:
    """Width of the embedded input the body takes (d_embed, or d_model with the adaptive input), found by building the
    config's embedding on the meta device (no memory)."""
    m = cfg.model
    vocab = max(m.cutoffs, default=0) + 1  # the width does not depend on the vocabulary
    with torch.device("meta"):
        embedding, _ = build_embedding_and_head(
            m.head, vocab, m.d_embed, m.d_model, m.cutoffs, m.div_val, tie=m.tie_weights
        )
    return embedding_width(embedding)


def make_body(cfg: Config, device: torch.device, seed: int) -> nn.Module:
    """The config's body on ``device`` (parameters initialized from ``seed``), in training mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        body = build_body(cfg, body_input_width(cfg))
    return body.train()


def deq_config(cfg: Config, limit: int | None) -> Config:
    """The DEQ preset with forward and backward limits ``limit`` and tolerance 1e-12 (None: the preset unchanged)."""
    if limit is None:
        return cfg
    return replace_config(cfg, deq_settings(max_iter=limit, backward_max_iter=limit, max_iter_jitter=0, tol=TINY_TOL,
                                            backward_tol=TINY_TOL))  # fmt: skip


def state_width(cfg: Config) -> int:
    """Features per position of the DEQ state z: d_model, or 2 d_model for TrellisNet's [h; c]."""
    return 2 * cfg.model.d_model if cfg.model.name in ("deq_trellisnet", "trellisnet") else cfg.model.d_model


def history_bytes(
    solver: str | deq_core.Solver,
    options: dict[str, Any],
    vector_bytes: int,
    iterations: int,
    max_iter: int | None = None,
) -> int:
    """Bytes of a solver's history buffers for iterates of ``vector_bytes``, after ``iterations`` iterations of a solve
    limited to ``max_iter`` (None: no limit): deq-core (>= 0.2.2) sizes them by min(m or memory, max_iter). Anderson
    keeps 2 (min(m, max_iter) - 1) vectors from the start; Broyden min(memory, max_iter) + 1 directions from the
    start, plus 2 (memory // 2) vectors of its rank-reduced base from its first reduction on (after memory updates,
    i.e. from iteration memory + 2; by default memory = max_iter: never reduced); fixed-point iteration none.
    Options not given take deq-core's defaults (m = 8, memory None). ``solver``: a name with ``options``, or a solver
    object (its own options)."""
    settings = {**deq_core.options_of(solver), **options}
    solver = solver if isinstance(solver, str) else solver.name

    def sized(entries: int) -> int:
        return entries if max_iter is None else min(entries, max_iter)

    if solver == "anderson":
        return 2 * (sized(int(settings["m"])) - 1) * vector_bytes
    if solver == "broyden":
        if settings["memory"] is None:  # the default: every update of the solve kept, never reduced
            if max_iter is None:
                raise ValueError("Broyden's default memory is max_iter: give max_iter to size its buffer.")
            return (max_iter + 1) * vector_bytes
        memory = int(settings["memory"])
        base = 2 * (memory // 2) if iterations >= memory + 2 else 0
        return (sized(memory) + 1 + base) * vector_bytes
    return 0


def param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def tensors_in(obj: Any) -> list[Tensor]:
    """Every tensor in a (nested) tuple/list state, or in a tensor, or none."""
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in tensors_in(item)]
    return []


@contextmanager
def precomputed_weights(body: nn.Module) -> Iterator[list[Tensor]]:
    """Inside the block, every parametrized (weight-normalized) weight of ``body`` is computed once, on entry, with
    autograd, and reused by the body; yields those parameter-sized tensors (to exclude them like the parameters)."""
    with deq_core.cached_weights(body):
        yield [
            getattr(module, name)
            for module in body.modules()
            if parametrize.is_parametrized(module)
            for name in module.parametrizations  # type: ignore[union-attr]
        ]


def warm_state(body: nn.Module, cfg: Config, proto: Protocol, plan: deq_core.Plan, device: torch.device) -> Any:
    """The state (memory, or TrellisNet history) after enough earlier segments to fill ``cfg.model.mem_len`` (at least
    one), run under no_grad (a DEQ with at most 2 iterations: only the state's size matters here)."""
    width = body_input_width(cfg)
    state = None
    with torch.no_grad():
        for _ in range(max(1, math.ceil(cfg.model.mem_len / proto.tgt_len))):
            x = torch.randn(proto.batch, proto.tgt_len, width, device=device)
            limit = None if plan.max_iter is None else min(plan.max_iter, 2)
            with deq_core.use_plan(body, deq_core.Plan(max_iter=limit)):
                state = body(x, state).state
    return state


# --------------------------------------------------------------------------------------------------------------------
# measuring


def peak_bytes(fn: Callable[[], T], device: torch.device) -> tuple[T, int]:
    """(fn(), peak bytes): ``deq_core.peak_live_bytes`` on CPU and meta; on CUDA the peak of
    ``torch.cuda.max_memory_allocated`` during ``fn`` above what was allocated before it."""
    if device.type != "cuda":
        return deq_core.peak_live_bytes(fn)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    return out, torch.cuda.max_memory_allocated(device) - start


def training_step(
    body: nn.Module, x: Tensor, state: Any, plan: deq_core.Plan, probe: Tensor, jac_weight: float
) -> Callable[[], BodyOutput]:
    """Forward with ``plan`` set on the body's DEQ layer, loss = sum(hidden * probe) (+ jac_weight x the Jacobian
    term when the plan asks for it), backward."""

    def run() -> BodyOutput:
        with deq_core.use_plan(body, plan):
            out: BodyOutput = body(x, state)
        loss = (out.hidden * probe).sum()
        if out.info is not None and out.info.jacobian_loss is not None:
            loss = loss + jac_weight * out.info.jacobian_loss
        loss.backward()
        return out

    return run


def measure_step(
    body: nn.Module, x: Tensor, state: Any, plan: deq_core.Plan, d_out: int, jac_weight: float = 0.0
) -> tuple[BodyOutput, int, int]:
    """(output, saved bytes, step peak bytes) of one training step of ``body`` on ``x`` after ``state``; ``d_out``:
    the width of the hidden states.

    Parameter and input gradients are allocated (zeros) before the step, so that backward accumulates into them in
    place and the peak counts no parameter-sized gradient; parameters, their weight-normalized copies, x, the state
    and the loss's random probe are excluded from the saved bytes.
    """
    for p in body.parameters():
        p.grad = torch.zeros_like(p)
    x.grad = torch.zeros_like(x)
    probe = torch.randn(x.shape[0], x.shape[1], d_out, device=x.device)
    with precomputed_weights(body) as weights:
        exclude = [*body.parameters(), *weights, x, *tensors_in(state), probe]
        step = training_step(body, x, state, plan, probe, jac_weight)
        (out, saved), peak = peak_bytes(lambda: deq_core.saved_tensor_bytes(step, exclude=exclude), x.device)
    return out, saved, peak


def measure_solve(body: nn.Module, x: Tensor, state: Any, plan: deq_core.Plan) -> int:
    """Peak live bytes of the body's forward under no_grad (a DEQ: the solver's buffers plus f's temporaries)."""
    plan = dataclasses.replace(plan, jacobian_loss=False)
    with precomputed_weights(body), torch.no_grad(), deq_core.use_plan(body, plan):
        return peak_bytes(lambda: body(x, state), x.device)[1]


def measure_twin(cfg: Config, proto: Protocol, n_layers: int | None = None) -> BodyMemory:
    """One training step of the explicit ``cfg`` (depth ``n_layers`` if given) on ``proto.twin_device``."""
    if n_layers is not None:
        cfg = replace_config(cfg, {"model.n_layers": n_layers})
    device = proto.twin_device
    body = make_body(cfg, device, proto.seed)
    state = warm_state(body, cfg, proto, deq_core.Plan(), device)
    x = torch.randn(proto.batch, proto.tgt_len, body_input_width(cfg), device=device, requires_grad=True)
    _, saved, peak = measure_step(body, x, state, deq_core.Plan(), cfg.model.d_model)
    return BodyMemory(saved=saved, step_peak=peak, params=param_bytes(body))


def measure_deq(cfg: Config, proto: Protocol, limit: int | None, jacobian: bool = False) -> BodyMemory:
    """One training step and one no-grad forward of the DEQ ``cfg`` at iteration limit ``limit`` (None: the
    preset's), with the Jacobian term when ``jacobian``, on ``proto.device``."""
    cfg = deq_config(cfg, limit)
    device = proto.device
    body = make_body(cfg, device, proto.seed)
    plan = deq_core.Plan(max_iter=cfg.deq.max_iter, jacobian_loss=jacobian)
    state = warm_state(body, cfg, proto, plan, device)
    x = torch.randn(proto.batch, proto.tgt_len, body_input_width(cfg), device=device, requires_grad=True)
    solve_peak = measure_solve(body, x, state, plan)
    out, saved, peak = measure_step(body, x, state, plan, cfg.model.d_model, cfg.deq.jac_weight)
    assert out.info is not None
    nfe = (out.info.nfe, out.info.nfe_backward)
    deq: Any = body.deq  # type: ignore[union-attr]
    vector = x.shape[0] * x.shape[1] * state_width(cfg) * x.element_size()
    histories = (
        history_bytes(deq.solver, {}, vector, nfe[0], cfg.deq.max_iter),
        history_bytes(deq.backward.solver, {}, vector, nfe[1], cfg.deq.backward_max_iter),
    )
    return BodyMemory(saved, peak, param_bytes(body), solve_peak, nfe, histories)


# --------------------------------------------------------------------------------------------------------------------
# running


def preset(name: str, quick: bool) -> Config:
    """The preset ``name``, or its ``tiny-`` version with ``quick``."""
    return get_config(f"tiny-{name}" if quick else name)


def reduction(deq: float, twin: float) -> str:
    """1 - deq / twin as a percentage."""
    return lb.percent(1.0 - deq / twin)


def deq_limits(name: str, proto: Protocol) -> tuple[int | None, ...]:
    """The iteration limits at which the DEQ preset ``name`` is measured (None: the preset's own)."""
    if not proto.iters:
        return (None,)
    extra = {proto.extra_limit} if proto.extra_limit and name in proto.extra_for else set()
    return tuple(sorted({*proto.iters, *extra}))


def deq_memories(pairs: Sequence[Pair], proto: Protocol, quick: bool) -> dict[tuple[str, bool], dict[int, BodyMemory]]:
    """Every distinct DEQ of ``pairs`` measured at each limit of ``proto.iters`` (or the preset's: key 0)."""
    results: dict[tuple[str, bool], dict[int, BodyMemory]] = {}
    for pair in pairs:
        key = (pair.deq, pair.jacobian)
        if key in results:
            continue
        cfg = preset(pair.deq, quick)
        results[key] = {}
        for limit in deq_limits(pair.deq, proto):
            start = time.perf_counter()
            results[key][limit or 0] = measure_deq(cfg, proto, limit, pair.jacobian)
            lb.note(f"DEQ {pair.deq_label}, limit {limit or 'preset'}: {time.perf_counter() - start:.0f} s")
    return results


def twin_memories(pairs: Sequence[Pair], proto: Protocol, quick: bool) -> dict[str, BodyMemory]:
    """Every distinct twin of ``pairs`` at its preset's depth."""
    results: dict[str, BodyMemory] = {}
    for pair in pairs:
        if pair.twin not in results:
            lb.note(f"twin {pair.twin} ...")
            results[pair.twin] = measure_twin(preset(pair.twin, quick), proto)
    return results


def sweep_memories(
    pairs: Sequence[Pair], proto: Protocol, depths: Sequence[int], quick: bool
) -> dict[str, dict[int, BodyMemory]]:
    """Each distinct twin of ``pairs`` at every depth of ``depths`` and at its preset's own depth."""
    results: dict[str, dict[int, BodyMemory]] = {}
    for pair in pairs:
        if pair.twin in results:
            continue
        cfg = preset(pair.twin, quick)
        results[pair.twin] = {}
        for depth in sorted({*depths, cfg.model.n_layers}):
            lb.note(f"twin {pair.twin} at depth {depth} ...")
            results[pair.twin][depth] = measure_twin(cfg, proto, depth)
    return results


def largest(memories: dict[int, BodyMemory]) -> BodyMemory:
    """The measurement at the largest iteration limit."""
    return memories[max(memories)]


def report_pairs(
    rep: lb.Report,
    pairs: Sequence[Pair],
    deqs: dict[tuple[str, bool], dict[int, BodyMemory]],
    twins: dict[str, BodyMemory],
) -> None:
    """The main table: each DEQ against its twin, measured and published reductions."""
    rows = []
    for pair in pairs:
        by_limit = deqs[(pair.deq, pair.jacobian)]
        deq, twin = largest(by_limit), twins[pair.twin]
        rows.append([
            pair.deq_label, max(by_limit) or "preset", pair.twin, lb.mib(twin.saved), lb.mib(deq.saved),
            reduction(deq.saved, twin.saved), lb.mib(twin.step_peak), lb.mib(deq.step_peak),
            reduction(deq.step_peak, twin.step_peak), f"{pair.paper_twin_gb} / {pair.paper_deq_gb}",
            reduction(pair.paper_deq_gb, pair.paper_twin_gb), pair.source,
        ])  # fmt: skip
    rep.table(
        ["DEQ", "DEQ limit", "explicit twin", "twin saved", "DEQ saved", "reduction (saved)", "twin step peak",
         "DEQ step peak", "reduction (peak)", "paper twin / DEQ (GB)", "paper reduction", "paper source"],
        rows,
    )  # fmt: skip


def report_limits(rep: lb.Report, deqs: dict[tuple[str, bool], dict[int, BodyMemory]]) -> list[str]:
    """The DEQs at each iteration limit; returns the names of those whose saved bytes changed with the limit."""
    rows, changed = [], []
    for (name, jacobian), by_limit in deqs.items():
        label = name + (" + JR" if jacobian else "")
        for limit, m in sorted(by_limit.items()):
            nfe = "-" if m.nfe is None else f"{m.nfe[0]} / {m.nfe[1]}"
            hist = "-" if m.histories is None else f"{lb.mib(m.histories[0])} / {lb.mib(m.histories[1])}"
            rows.append([
                label, limit or "preset", nfe, lb.mib(m.saved), lb.mib(m.step_peak), lb.mib(m.solve_peak or 0), hist,
                lb.mib(m.params),
            ])  # fmt: skip
        if len({m.saved for m in by_limit.values()}) > 1:
            changed.append(label)
    rep.table(
        ["DEQ", "iteration limit", "NFE forward / backward", "saved", "step peak", "solve peak",
         "solver histories forward / backward", "body params"],
        rows,
    )  # fmt: skip
    return changed


def report_sweep(
    rep: lb.Report,
    pairs: Sequence[Pair],
    deqs: dict[tuple[str, bool], dict[int, BodyMemory]],
    sweeps: dict[str, dict[int, BodyMemory]],
) -> list[str]:
    """Twin saved bytes against depth, with the reduction of its DEQ (constant); returns the twins whose saved bytes
    do not grow strictly with depth."""
    all_depths = sorted({d for by_depth in sweeps.values() for d in by_depth})
    rows, flat = [], []
    for twin, by_depth in sweeps.items():
        pair = next(p for p in pairs if p.twin == twin and not p.jacobian)
        deq = largest(deqs[(pair.deq, False)])
        cells = [
            f"{lb.mib(by_depth[d].saved)} ({reduction(deq.saved, by_depth[d].saved)})" if d in by_depth else ""
            for d in all_depths
        ]
        depths = sorted(by_depth)
        per_layer = (by_depth[depths[-1]].saved - by_depth[depths[0]].saved) / (depths[-1] - depths[0])
        rows.append([twin, pair.deq, lb.mib(deq.saved), lb.mib(per_layer), f"{deq.saved / per_layer:.2f}", *cells])
        if any(by_depth[a].saved >= by_depth[b].saved for a, b in zip(depths, depths[1:])):
            flat.append(twin)
    header = ["explicit twin", "DEQ", "DEQ saved", "twin saved per layer", "DEQ saved in twin layers"]
    rep.table([*header, *(f"depth {d}" for d in all_depths)], rows)
    return flat


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny versions of the presets (seconds)")
    parser.add_argument("--out", metavar="FILE", help="also write the Markdown report to FILE")
    parser.add_argument("--tgt-len", type=int, default=150, help="positions per segment (default 150)")
    parser.add_argument("--batch", type=int, default=15, help="batch size (default 15)")
    parser.add_argument(
        "--iters", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
        help="DEQ iteration limits, comma-separated (default: 2,4 on CPU, 2,3 with --quick, the presets' on CUDA)",
    )  # fmt: skip
    parser.add_argument("--extra-limit", type=int, default=22, help="one more limit for --extra-for (0: none)")
    parser.add_argument("--extra-for", nargs="*", default=list(EXTRA_FOR), help="DEQ presets for --extra-limit")
    parser.add_argument(
        "--depths", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
        help="twin depths of the sweep (default 4,8,16,18,32; 2,4,8 with --quick)",
    )  # fmt: skip
    parser.add_argument("--only", nargs="*", default=None, help="only the pairs whose DEQ preset is one of these")
    add_device_argument(parser)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def make_protocol(args: argparse.Namespace) -> Protocol:
    """Sizes and devices from the command line: on CUDA everything on the GPU at the presets' limits; on CPU the DEQs
    on the CPU at small limits and the twins on the meta device."""
    device = args.device
    cuda = device.type == "cuda"
    default_iters = () if cuda else ((2, 3) if args.quick else (2, 4))
    return Protocol(
        tgt_len=args.tgt_len,
        batch=args.batch,
        device=device,
        twin_device=device if cuda else torch.device("meta"),
        iters=default_iters if args.iters is None else args.iters,
        extra_limit=args.extra_limit,
        extra_for=tuple(args.extra_for),
        seed=args.seed,
    )


def setup_text(proto: Protocol, quick: bool) -> str:
    """The paragraph saying what was measured, at which sizes and where."""
    scale = "tiny versions (`--quick`) of the presets" if quick else "paper presets"
    if proto.device.type == "cuda":
        where = "every model on CUDA at its preset's iteration limits (step peak: torch.cuda.max_memory_allocated)"
    else:
        extra = f", and {proto.extra_limit} for {', '.join(proto.extra_for)}" if proto.extra_limit else ""
        where = (
            f"DEQs on the CPU at iteration limits {list(proto.iters)}{extra} (tolerance 1e-12: every iteration runs), "
            "explicit twins on the meta device"
        )
    return (
        f"torch {torch.__version__}, float32, {scale}; one training step (forward, loss = sum of the hidden states "
        f"times a fixed random tensor, backward) at tgt_len {proto.tgt_len}, batch {proto.batch}, memory (mem_len of "
        "the preset) filled by earlier segments, training mode; embedding and softmax excluded (the body alone). "
        f"{where}. MiB. Saved = storages saved for backward (parameters, their weight-normalized copies, the input and "
        "the memory excluded); step peak = largest total of live tensors created during forward + backward (solver "
        "histories, adjoint solve, temporaries). DEQ columns at the DEQ's largest measured iteration limit (forward = "
        "backward)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    proto = make_protocol(args)
    depths = args.depths or ((2, 4, 8) if args.quick else (4, 8, 16, 18, 32))
    pairs = [p for p in PAIRS if args.only is None or p.deq in args.only]
    if not pairs:
        raise SystemExit(f"--only matches no pair; DEQ presets: {sorted({p.deq for p in PAIRS})}")

    deqs = deq_memories(pairs, proto, args.quick)
    twins = twin_memories(pairs, proto, args.quick)
    sweeps = sweep_memories(pairs, proto, depths, args.quick)

    rep = lb.Report()
    rep.add("## Training memory of the body: DEQ vs explicit twin")
    rep.add()
    rep.add(setup_text(proto, args.quick))
    rep.add()
    report_pairs(rep, pairs, deqs, twins)
    rep.add(
        "The paper's GB are totals of a GPU training run (activations, solver buffers, parameters, optimizer state, "
        "allocator caching), ours the body's activations (saved) and live tensors (step peak); compare the "
        "reductions, not the sizes. The saved-bytes reduction is 1 - (DEQ saved) / (twin saved per layer x depth): "
        "a DEQ saves what about one layer of its twin saves (last table), whatever its iterations; the step peak adds "
        "to it the solvers' history buffers (next table), which the twin does not have."
    )
    rep.add()
    rep.add("### The DEQs at each iteration limit (the forward and the backward solver both stop at the limit)")
    rep.add()
    changed = report_limits(rep, deqs)
    rep.add(
        "Saved bytes independent of the iteration limit: "
        + ("yes, for every DEQ." if not changed else f"NO for {', '.join(changed)}.")
    )
    rep.add()
    rep.add("### Explicit twin's saved bytes against depth (reduction by its DEQ, whose saved bytes do not change)")
    rep.add()
    flat = report_sweep(rep, pairs, deqs, sweeps)
    rep.add(
        "Twin's saved bytes grow with every added layer: "
        + ("yes, for every twin." if not flat else f"NO for {', '.join(flat)}.")
    )
    rep.write(args.out, lb.command_line("memory.py", argv))
    return 0 if not changed and not flat else 1


if __name__ == "__main__":
    sys.exit(main())
