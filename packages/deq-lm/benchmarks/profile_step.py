"""Where the time of a DEQ-Transformer training step goes: inside f or outside it (solvers, weight norm, the rest).

    python packages/deq-lm/benchmarks/profile_step.py [--quick] [--steps 10] [--config pydoc-deq-transformer]
        [--twin pydoc-transformer-xl] [--set key=value ...] [--device cpu] [--out FILE]

Models: the config's DEQ-Transformer (default ``pydoc-deq-transformer``: width 128, 4 heads, FFN 2880, tgt_len 64,
mem_len 64, batch 16; Anderson forward and backward, limits 20 / 20, tol 1e-3) and its explicit twin (default
``pydoc-transformer-xl``, 4 layers), freshly initialized, on the second training segment of the pydoc corpus with the
memory of the first. A training step = zero_grad, forward with targets, mean token NLL, backward, Adam step (lr of
the config), in training mode (dropout on).

As ``deq-vision/benchmarks/profile_step.py``: the DEQ / twin step ratio from ``--steps`` interleaved uninstrumented
pairs (--quick: 2), then the DEQ step instrumented with ``lab.steptime.StepTimer`` (f = the cell's
``f``, the DEQ layer's call, ``deq_core.cached_weights``), split into f's own work and the rest. ``--quick`` also
shrinks the models (``--set`` overrides apply to both configs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _lm_bench as lb
import torch
from torch import Tensor

import deq_core
from deq_core.train.cli import add_device_argument
from deq_core.train.overrides import apply_overrides
from deq_lm.configs import Config, get_config
from deq_lm.models import SequenceModel, build_model
from deq_lm.problems import build_problem

# lab/ (the step timer) belongs to the checkout and is never installed: found from this file, wherever the
# script is run from.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from lab.steptime import (  # noqa: E402
    StepTimer,
    interleaved_ratio,
    profile_steps,
    split_rows,
    split_summary,
    training_step,
)

QUICK = ["d_embed=16", "d_model=16", "n_heads=2", "d_head=8", "d_ff=32", "tgt_len=12", "mem_len=12", "batch_size=4"]


@dataclass
class Setup:
    cfg: Config
    model: SequenceModel
    opt: torch.optim.Optimizer
    x: Tensor
    y: Tensor
    state: Any


def make_setup(name: str, overrides: Sequence[str], device: torch.device, seed: int) -> Setup:
    """The config's fresh model on ``device`` with Adam, the second training segment and the first's memory."""
    cfg = apply_overrides(get_config(name), overrides)
    problem = build_problem(cfg)
    torch.manual_seed(seed)
    model = build_model(cfg, problem.vocab_size).to(device).train()
    first = problem.train_batch(0, cfg.optim.batch_size)[0].to(device)
    x, y = (t.to(device) for t in problem.train_batch(1, cfg.optim.batch_size))
    with torch.no_grad():
        state = model(first).state
    return Setup(cfg, model, torch.optim.Adam(model.parameters(), lr=cfg.optim.lr), x, y, state)


def step_fn(s: Setup, timer: StepTimer | None = None) -> Callable[[], None]:
    """One training step of ``s``; with a timer, its regions are timed."""

    def loss() -> Tensor:
        out = s.model(s.x, s.state, targets=s.y)
        assert out.nll is not None
        return out.nll.mean()

    return training_step(loss, s.opt, timer)


def instrument(s: Setup, timer: StepTimer) -> None:
    """Wrap the cell's f, the DEQ layer's call and the weight computation with ``timer``."""
    body: Any = s.model.body
    body.cell.f = timer.wrap_f(body.cell.f)  # an instance attribute: DEQBody calls cell.f
    body.deq.forward = timer.wrap("deq forward", body.deq.forward)
    deq_core.cached_weights = timer.cached_weights  # DEQBody calls deq_core.cached_weights(self.cell)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 steps, tiny widths")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--config", default="pydoc-deq-transformer")
    parser.add_argument("--twin", default="pydoc-transformer-xl")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of both configs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the Markdown report to FILE")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    steps = 2 if args.quick else args.steps
    overrides = [*(QUICK if args.quick else []), *args.set]
    deq = make_setup(args.config, overrides, args.device, args.seed)
    twin = make_setup(args.twin, overrides, args.device, args.seed)
    sync = (lambda: torch.cuda.synchronize(args.device)) if args.device.type == "cuda" else None
    ratio, t_deq, t_twin = interleaved_ratio(step_fn(deq), step_fn(twin), steps, sync)
    timer = StepTimer(synchronize=sync)
    instrument(deq, timer)
    prof = profile_steps(timer, step_fn(deq, timer), steps)
    cfg = deq.cfg
    rep = lb.Report()
    rep.add(f"## Profile of a DEQ-Transformer training step: {args.config} vs {args.twin}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s); batch "
        f"{tuple(deq.x.shape)} tokens, memory {cfg.model.mem_len}; {cfg.deq.solver} {cfg.deq.max_iter} / "
        f"{cfg.deq.backward_solver} {cfg.deq.backward_max_iter} iterations, tol {cfg.deq.tol:g} / "
        f"{cfg.deq.backward_tol:g}; medians of {steps} steps. "
        f"Uninstrumented: DEQ {1e3 * t_deq:.0f} ms, twin ({twin.cfg.model.n_layers} layers) {1e3 * t_twin:.0f} ms per "
        f"step; instrumented DEQ {1e3 * prof.total:.0f} ms."
    )
    rep.add()
    rep.table(["part of the DEQ step", "ms (instrumented)", "share", "x twin step"], split_rows(prof, ratio))
    rep.add(split_summary(prof, ratio, "twin"))
    rep.write(args.out, lb.command_line("profile_step.py", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
