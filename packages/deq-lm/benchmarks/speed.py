"""Training-step and inference time of the DEQ-Transformer, with and without Jacobian regularization (JR), against its
Transformer-XL twins, in one run, as ratios; and the number of function evaluations (NFE) each DEQ step needs.

    python packages/deq-lm/benchmarks/speed.py [--quick] [--out FILE] [--repeats 9]
        [--runs RUN_DIR ...]      # trained run directories (config.json + checkpoints/step_N/model.safetensors)
        [--set key=value ...]     # overrides of every freshly built config (e.g. smaller widths for tests)

Models (the CPU-scale ``pydoc-*`` presets: width 128, 4 heads, FFN 512, tgt_len 64, mem_len 64, batch 16):

- ``DEQ``: pydoc-deq-transformer (Anderson forward, limit 20, tol 1e-3; Anderson backward, limit 20; eval limit 30);
- ``DEQ + JR``: pydoc-deq-transformer-jr (limits 12) with the Jacobian term (Hutchinson estimate of ||J_f(z*)||_F^2,
  one probe, weight 2) computed and backpropagated on EVERY timed step; the preset applies it with probability
  ``jac_prob`` = 0.4, so the row ``DEQ + JR, expected`` is p x (with the term) + (1 - p) x (the same model and limits
  without it, row ``DEQ, JR limits, no term``);
- ``TXL 4 layers``: pydoc-transformer-xl, the DEQ's twin (same width, memory and head);
- ``TXL 18 layers``: the same with 18 layers, mirroring the papers' comparison with an 18-layer Transformer-XL.

Timed: a training step = forward with targets, loss = mean token NLL (+ weight x the Jacobian term), backward (no
optimizer step), in training mode (dropout on; a DEQ at its preset's limit, the upper end of the training loop's
jitter), after the memory of a previous segment; inference = a forward of the same segment in eval mode under no_grad
(the DEQ at its eval limits). Medians over ``--repeats`` (9) interleaved rounds (every model once per round, so that
the load of a shared machine affects all alike) after one warm-up each. NFE: forward / backward calls of f in the
timed training steps and forward calls at inference (medians), and the NFE the DEQ needs to reach its tolerance at
inference when allowed 100 iterations.

Without ``--runs`` every model is freshly initialized, and an untrained DEQ's NFE is not a trained one's. With
``--runs`` the given runs' models are loaded (``deq_lm.evaluate.load_model``: config.json and the latest checkpoint);
a DEQ run with a Jacobian weight also gives the rows with and without the term; the 18-layer TXL is always fresh
(times do not depend on the weights; its row is then built from the TXL run's config, or the preset). The segments are
the first two training segments of the pydoc corpus. ``--quick``: one round (under a minute).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _lm_bench as lb
import torch
from torch import Tensor

import deq_core
from deq_core import DEQInfo
from deq_core.train.checkpoints import resolve_checkpoint
from deq_core.train.cli import add_device_argument
from deq_core.train.overrides import apply_overrides
from deq_core.train.run_config import replace_config
from deq_lm.configs import Config, get_config
from deq_lm.models import SequenceModel, build_model
from deq_lm.problems import Problem, build_problem

DEQ_PRESET, JR_PRESET, TXL_PRESET = "pydoc-deq-transformer", "pydoc-deq-transformer-jr", "pydoc-transformer-xl"
DEEP_TXL_LAYERS = 18
CPU = torch.device("cpu")
TOL_LIMIT = 100  # inference iteration limit when measuring the NFE needed to reach the tolerance
PAPER = (
    "Published (GPU, WikiText-103): DEQ-Transformer 2.82x the training time and 1.76x the inference time of an "
    "18-layer Transformer-XL (DEQ paper); JR paper Table 1: DEQ 3.1x, DEQ + JR 1.5x (pre-LN 1.6x) the training time "
    "of the 18-layer Transformer-XL, with 12-14 instead of 30 forward NFE."
)


@dataclass
class Entry:
    """One timed model: its label, config, model, whether the Jacobian term is added on every training step, and
    where its weights come from ("fresh" or a checkpoint)."""

    label: str
    cfg: Config
    model: SequenceModel
    jacobian: bool
    source: str
    train_s: list[float] = field(default_factory=list)
    infer_s: list[float] = field(default_factory=list)
    nfe_train: list[tuple[int, int | None]] = field(default_factory=list)
    nfe_infer: list[int] = field(default_factory=list)
    to_tol: tuple[int, float] | None = None  # (NFE, fraction of sequences converged) at limit TOL_LIMIT

    @property
    def is_deq(self) -> bool:
        return self.model.is_deq


@dataclass(frozen=True)
class Segments:
    """Two consecutive training segments (inputs, targets), each (batch, tgt_len): the first only fills memory."""

    first: tuple[Tensor, Tensor]
    second: tuple[Tensor, Tensor]


# --------------------------------------------------------------------------------------------------------------------
# models


def fresh_model(cfg: Config, vocab_size: int, seed: int) -> SequenceModel:
    """A freshly initialized model of ``cfg`` (parameters from ``seed``)."""
    torch.manual_seed(seed)
    return build_model(cfg, vocab_size)


def fresh_entries(overrides: Sequence[str], seed: int) -> tuple[list[Entry], Problem]:
    """The five models of the module docstring, freshly initialized, and the pydoc problem (its vocabulary,
    segments)."""
    deq, jr, txl = (apply_overrides(get_config(name), overrides) for name in (DEQ_PRESET, JR_PRESET, TXL_PRESET))
    problem = build_problem(deq)
    vocab = problem.vocab_size
    jr_model = fresh_model(jr, vocab, seed)
    entries = [
        Entry("DEQ", deq, fresh_model(deq, vocab, seed), False, "fresh"),
        Entry("DEQ + JR", jr, jr_model, True, "fresh"),
        Entry("DEQ, JR limits, no term", jr, jr_model, False, "fresh"),
        Entry(f"TXL {txl.model.n_layers} layers", txl, fresh_model(txl, vocab, seed), False, "fresh"),
    ]
    entries.append(deep_txl(txl, vocab, seed))
    return entries, problem


def deep_txl(txl: Config, vocab_size: int, seed: int) -> Entry:
    """The 18-layer Transformer-XL of the same width as ``txl``, freshly initialized."""
    cfg = replace_config(txl, {"model.n_layers": DEEP_TXL_LAYERS})
    return Entry(f"TXL {DEEP_TXL_LAYERS} layers", cfg, fresh_model(cfg, vocab_size, seed), False, "fresh")


def run_entries(runs: Sequence[Path], seed: int) -> tuple[list[Entry], Problem]:
    """Entries for trained run directories (a DEQ with a Jacobian weight gives two: with and without the term),
    plus a fresh 18-layer TXL of the first TXL run's width (or the preset's); and the first run's problem."""
    from deq_lm.evaluate import load_model  # imports the training loop (Accelerate): only when runs are given

    entries: list[Entry] = []
    problem: Problem | None = None
    txl: Config | None = None
    for run in runs:
        cfg, run_problem, model, run_dir = load_model(run)
        problem = problem or run_problem
        if run_problem.vocab_size != problem.vocab_size:
            raise SystemExit(f"{run} has a vocabulary of {run_problem.vocab_size}, the first run {problem.vocab_size}.")
        source = f"{run_dir.name} @ {resolve_checkpoint(run)[1].name}"
        if model.is_deq and cfg.deq.jac_weight > 0:
            entries.append(Entry(f"{run_dir.name} + JR", cfg, model, True, source))
            entries.append(Entry(f"{run_dir.name}, no term", cfg, model, False, source))
        else:
            entries.append(Entry(run_dir.name, cfg, model, False, source))
        if cfg.model.name == "transformer_xl" and txl is None:
            txl = cfg
    assert problem is not None
    entries.append(deep_txl(txl or get_config(TXL_PRESET), problem.vocab_size, seed))
    return entries, problem


def segments(problem: Problem, batch_size: int, device: torch.device = CPU) -> Segments:
    """The first two training segments for a batch of ``batch_size`` sequences, on ``device``."""
    first, second = (tuple(t.to(device) for t in problem.train_batch(i, batch_size)) for i in (0, 1))
    return Segments(first, second)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------------------
# timing


def training_step(entry: Entry, seg: tuple[Tensor, Tensor], state: Any) -> Callable[[], DEQInfo | None]:
    """Forward with targets, mean NLL (+ jac_weight x the Jacobian term when ``entry.jacobian``), backward."""
    x, y = seg

    def run() -> DEQInfo | None:
        entry.model.zero_grad(set_to_none=True)
        with deq_core.use_plan(entry.model, deq_core.Plan(jacobian_loss=entry.jacobian)):
            out = entry.model(x, state, targets=y)
        assert out.nll is not None
        loss = out.nll.mean()
        if entry.jacobian and out.info is not None and out.info.jacobian_loss is not None:
            loss = loss + entry.cfg.deq.jac_weight * out.info.jacobian_loss
        loss.backward()
        return out.info

    return run


def inference(entry: Entry, x: Tensor, state: Any) -> Callable[[], DEQInfo | None]:
    """A no_grad forward (the model is put in eval mode by the caller)."""

    def run() -> DEQInfo | None:
        with torch.no_grad():
            return entry.model(x, state).info

    return run


def previous_state(entry: Entry, x: Tensor, training: bool) -> Any:
    """The state (memory) after the segment ``x``, computed under no_grad in training or eval mode."""
    entry.model.train(training)
    with torch.no_grad():
        return entry.model(x).state


class Timer:
    """The training step and inference of one entry, with the state of the previous segment in each mode."""

    def __init__(self, entry: Entry, seg: Segments) -> None:
        self.entry = entry
        self.step = training_step(entry, seg.second, previous_state(entry, seg.first[0], training=True))
        self.infer = inference(entry, seg.second[0], previous_state(entry, seg.first[0], training=False))

    def round(self, record: bool) -> None:
        """One timed training step and one timed inference (recorded unless a warm-up)."""
        e = self.entry
        e.model.train()
        holder: list[DEQInfo | None] = []
        train_s = lb.seconds(lambda: holder.append(self.step()))
        e.model.eval()
        infer_s = lb.seconds(lambda: holder.append(self.infer()))
        if not record:
            return
        e.train_s.append(train_s)
        e.infer_s.append(infer_s)
        train_info, infer_info = holder
        if train_info is not None and infer_info is not None:
            e.nfe_train.append((train_info.nfe, train_info.nfe_backward))
            e.nfe_infer.append(infer_info.nfe)

    def nfe_to_tolerance(self) -> None:
        """Inference NFE with the limit raised to TOL_LIMIT, and the fraction of sequences that reached the tolerance
        (untimed; DEQs only)."""
        if getattr(self.entry.model.body, "deq", None) is None:
            return
        self.entry.model.eval()
        with deq_core.use_plan(self.entry.model, deq_core.Plan(max_iter=TOL_LIMIT)):  # the layer's eval tol
            info = self.infer()
        assert info is not None
        self.entry.to_tol = (info.nfe, float(info.converged.float().mean()))


def run_rounds(entries: Sequence[Entry], seg: Segments, repeats: int) -> None:
    """One warm-up round, then ``repeats`` interleaved rounds (every entry once per round), then the NFE to reach
    the tolerance."""
    timers = [Timer(e, seg) for e in entries]
    for t in timers:
        t.round(record=False)
    for r in range(repeats):
        for t in timers:
            t.round(record=True)
        lb.note(f"round {r + 1}/{repeats} done")
    for t in timers:
        t.nfe_to_tolerance()


# --------------------------------------------------------------------------------------------------------------------
# report


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def median_nfe(values: Sequence[int | None]) -> str:
    found = [v for v in values if v is not None]
    return f"{statistics.median(found):g}" if found else "-"


def expected_jr(entries: Sequence[Entry]) -> tuple[str, float, float] | None:
    """(label, train s, inference s) of the JR model with the term applied with its config's probability: p x the
    step with the term + (1 - p) x the step without it (inference has no term)."""
    with_term = next((e for e in entries if e.jacobian), None)
    without = next((e for e in entries if with_term and e.model is with_term.model and not e.jacobian), None)
    if with_term is None or without is None:
        return None
    p = with_term.cfg.deq.jac_prob
    train = p * lb.median(with_term.train_s) + (1 - p) * lb.median(without.train_s)
    return f"{with_term.label}, expected (term with p = {p:g})", train, lb.median(without.infer_s)


def report(rep: lb.Report, entries: Sequence[Entry], repeats: int, batch: tuple[int, int]) -> None:
    """The table of times, ratios and NFE, and the notes."""
    explicit = [e for e in entries if not e.is_deq]
    twin, deep = explicit[0], explicit[-1]
    rows = []

    def row(label: str, train: float, infer: float, nfe: list[str], source: str) -> None:
        rows.append([
            label, f"{train:.3f}", ratio(train, lb.median(twin.train_s)), ratio(train, lb.median(deep.train_s)),
            f"{infer:.3f}", ratio(infer, lb.median(twin.infer_s)), ratio(infer, lb.median(deep.infer_s)), *nfe, source,
        ])  # fmt: skip

    for e in entries:
        nfe = ["-", "-", "-"]
        if e.is_deq:
            fwd = median_nfe([n[0] for n in e.nfe_train])
            bwd = median_nfe([n[1] for n in e.nfe_train])
            tol = "-" if e.to_tol is None else f"{e.to_tol[0]} ({lb.percent(e.to_tol[1])} converged)"
            nfe = [f"{fwd} / {bwd}", median_nfe(e.nfe_infer), tol]
        row(e.label, lb.median(e.train_s), lb.median(e.infer_s), nfe, e.source)
    expected = expected_jr(entries)
    if expected is not None:
        row(expected[0], expected[1], expected[2], ["-", "-", "-"], "computed")
    rep.table(
        ["model", "train step (s)", f"x {twin.label}", f"x {deep.label}", "inference (s)", f"x {twin.label}",
         f"x {deep.label}", "train NFE fwd / bwd", "inference NFE", f"inference NFE to tol (limit {TOL_LIMIT})",
         "weights"],
        rows,
    )  # fmt: skip
    trained = any(e.source != "fresh" for e in entries if e.is_deq)
    rep.add(
        f"Batch {batch[0]} x {batch[1]} tokens, medians of {repeats} interleaved rounds after one warm-up, "
        f"torch {torch.__version__} on {next(twin.model.parameters()).device} with {torch.get_num_threads()} "
        "thread(s). "
        + (
            "DEQ rows use trained checkpoints: their NFE are those of trained models."
            if trained
            else "All models are freshly initialized: an untrained DEQ's NFE, and hence its time, are not a trained "
            "one's (run with --runs for those)."
        )
    )
    rep.add()
    rep.add(PAPER)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timed round (under a minute at the pydoc sizes)")
    parser.add_argument("--out", metavar="FILE", help="also write the Markdown report to FILE")
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds (default 9; --quick: 1)")
    parser.add_argument("--runs", nargs="+", type=Path, default=None, help="trained run directories")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of the fresh configs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    add_device_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    repeats = 1 if args.quick else args.repeats
    if args.runs:
        entries, problem = run_entries(args.runs, args.seed)
    else:
        entries, problem = fresh_entries(args.set, args.seed)
    for e in entries:
        e.model.to(args.device)
    seg = segments(problem, entries[0].cfg.optim.batch_size, args.device)
    run_rounds(entries, seg, repeats)
    rep = lb.Report()
    rep.add("## Training and inference time: DEQ-Transformer (with and without JR) vs Transformer-XL")
    rep.add()
    report(rep, entries, repeats, tuple(seg.second[0].shape))
    rep.write(args.out, lb.command_line("speed.py", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
