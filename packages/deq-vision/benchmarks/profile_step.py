"""Where the time of an MDEQ training step goes, and why it costs several ResNet-twin steps.

    python packages/deq-vision/benchmarks/profile_step.py [--quick] [--steps 10] [--config digits-mdeq]
        [--twin digits-resnet] [--batch N] [--device cpu] [--out FILE]

Models: the config's MDEQ (default ``digits-mdeq``: ``mdeq_mini``, two branches 16x16 and 8x8, Broyden forward and
backward, 12 + 12 iterations, tol 1e-3, batch 64 of 16x16 grayscale images) and its twin (``digits-resnet``:
``resnet_mini``), both freshly initialized, on one random batch, with the config's optimizer (timm's,
``cfg.optim.opt``). A training step = zero_grad, forward, cross-entropy, backward, optimizer step (no data loading: the
batch is on the device already).

Two measurements, each over ``--steps`` steps (--quick: 2) after one warm-up:

1. the step times of the MDEQ and the twin, interleaved (MDEQ, twin, MDEQ, ...), uninstrumented: the ratio
   MDEQ / twin (median of per-pair ratios);
2. the MDEQ's step instrumented with ``lab.steptime.StepTimer``: wall time inside f (its calls without
   autograd by the forward solver, its tracked call with autograd, and every backward pass through its graph, timed by
   identity autograd Functions at f's output and input) and outside it (the forward solver, the adjoint solver between
   the passes, computing the weight-normalized weights once per step, the rest of the forward and backward, the
   optimizer). The fractions of the instrumented step split the uninstrumented MDEQ / twin ratio into what f's own
   work costs and what the rest costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import deq_core
from deq_core.train.cli import add_device_argument
from deq_core.train.reports import MarkdownReport
from deq_vision.configs import Config, get_config
from deq_vision.train import build_model, build_optimizer

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


@dataclasses.dataclass
class Setup:
    """A model, its optimizer and a batch on the device."""

    cfg: Config
    model: nn.Module
    opt: torch.optim.Optimizer
    x: Tensor
    y: Tensor


def make_setup(name: str, batch: int, device: torch.device, seed: int) -> Setup:
    cfg = get_config(name)
    torch.manual_seed(seed)
    model = build_model(cfg).to(device).train()
    opt = build_optimizer(model, cfg.optim)
    gen = torch.Generator().manual_seed(seed + 1)
    side = cfg.data.image_size
    x = torch.randn(batch, cfg.in_chans, side, side, generator=gen).to(device)
    y = torch.randint(0, cfg.head_classes, (batch,), generator=gen).to(device)
    return Setup(cfg, model, opt, x, y)


def step_fn(s: Setup, timer: StepTimer | None = None) -> Callable[[], None]:
    """One training step of ``s``; with a timer, its regions are timed."""
    return training_step(lambda: nn.functional.cross_entropy(s.model(s.x), s.y), s.opt, timer)


def synchronizer(device: torch.device) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def instrument(s: Setup, timer: StepTimer) -> None:
    """Wrap the MDEQ's f, its DEQ layer's call and its weight computation with ``timer``."""
    model: Any = s.model
    model.cell = timer.wrap_f(model.cell)  # an instance attribute: MDEQ.equilibrium calls self.cell
    model.deq.forward = timer.wrap("deq forward", model.deq.forward)
    deq_core.cached_weights = timer.cached_weights  # MDEQ.equilibrium calls deq_core.cached_weights(self)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 steps, batch 8")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--config", default="digits-mdeq")
    parser.add_argument("--twin", default="digits-resnet")
    parser.add_argument("--batch", type=int, default=None, help="default: the config's batch size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the Markdown report to FILE")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    steps = 2 if args.quick else args.steps
    mdeq = make_setup(args.config, 8 if args.quick else args.batch or get_config(args.config).batch_size,
                      args.device, args.seed)  # fmt: skip
    twin = make_setup(args.twin, mdeq.x.shape[0], args.device, args.seed)
    sync = synchronizer(args.device)
    ratio, t_mdeq, t_twin = interleaved_ratio(step_fn(mdeq), step_fn(twin), steps, sync)
    timer = StepTimer(synchronize=sync)
    instrument(mdeq, timer)
    prof = profile_steps(timer, step_fn(mdeq, timer), steps)
    cfg = mdeq.cfg
    rep = MarkdownReport()
    rep.add(f"## Profile of an MDEQ training step: {args.config} ({cfg.model.name}) vs {args.twin}")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s); batch "
        f"{mdeq.x.shape[0]} of {tuple(mdeq.x.shape[1:])}; {cfg.deq.solver} {cfg.deq.max_iter} / "
        f"{cfg.deq.backward_solver} {cfg.deq.backward_max_iter} iterations, tol {cfg.deq.tol:g} / "
        f"{cfg.deq.backward_tol:g}; medians of {steps} steps. "
        f"Uninstrumented: MDEQ {1e3 * t_mdeq:.0f} ms, twin {1e3 * t_twin:.1f} ms per step; instrumented MDEQ "
        f"{1e3 * prof.total:.0f} ms."
    )
    rep.add()
    rep.table(["part of the MDEQ step", "ms (instrumented)", "share", "x twin step"], split_rows(prof, ratio))
    rep.add(split_summary(prof, ratio, "twin"))
    rep.write(args.out, "Command: `OMP_NUM_THREADS=1 python packages/deq-vision/benchmarks/profile_step.py "
              + " ".join(argv if argv is not None else sys.argv[1:]) + "`")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
