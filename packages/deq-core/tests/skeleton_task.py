"""A tiny task for the training skeleton's tests: regress y = sin(A x) with a small DEQ (or without one), batches a
function of (seed, step). Run as a script it trains one run (for the multi-process test under accelerate launch):
``python skeleton_task.py OUTPUT_DIR [key=value ...]`` with keys of :class:`TinyConfig`, a flat config that shows
the skeleton its ``run``, ``optim`` and ``deq`` sections."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import deq_core
from deq_core.train.deq_config import DEQConfig
from deq_core.train.sections import OptimConfig, RunConfig
from deq_core.train.task import Forward, Parts, StepSchedule, Task
from deq_core.train.trainer import train


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    use_deq: bool = True
    steps: int = 30
    batch_size: int = 16
    lr: float = 3e-2
    seed: int = 0
    grad_accum: int = 1
    pretrain_steps: int = 3
    jac_weight: float = 0.5
    jac_prob: float = 0.5
    max_iter: int = 12
    max_iter_jitter: int = 4
    dropout: float = 0.1
    stop_after: int = 0
    save_every: int = 0
    save_grads_at: int = 0
    log_every: int = 1
    eval_every: int = 5
    log_with: tuple[str, ...] = ()

    @property
    def run(self) -> RunConfig:
        return RunConfig(
            seed=self.seed, log_every=self.log_every, eval_every=self.eval_every, save_every=self.save_every,
            stop_after=self.stop_after, save_grads_at=self.save_grads_at, log_with=self.log_with,
        )  # fmt: skip

    @property
    def optim(self) -> OptimConfig:
        return OptimConfig(batch_size=self.batch_size, grad_accum=self.grad_accum, lr=self.lr, grad_clip=1.0)

    @property
    def deq(self) -> DEQConfig:
        return DEQConfig(
            max_iter=self.max_iter, max_iter_jitter=self.max_iter_jitter, pretrain_steps=self.pretrain_steps,
            pretrain_depth=2, jac_weight=self.jac_weight, jac_prob=self.jac_prob,
        )  # fmt: skip


class TinyDEQModel(nn.Module):
    """x (B, 4) -> z* = tanh(W z + U x) (B, 8) -> head (B, 2); ``deq=False``: two explicit layers. The forward
    takes no DEQ arguments: the skeleton sets the step's Plan on the layer."""

    def __init__(self, deq: bool, dropout: float) -> None:
        super().__init__()
        self.inject = nn.Linear(4, 8)
        self.cell = nn.Linear(8, 8, bias=False)
        with torch.no_grad():
            self.cell.weight.mul_(0.3)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, 2)
        self.deq = deq_core.DEQ(solver="anderson", max_iter=12, tol=1e-5) if deq else None

    def forward(self, x: Tensor) -> tuple[Tensor, Any]:
        u = self.drop(self.inject(x))
        if self.deq is None:
            return self.head(torch.tanh(self.cell(torch.tanh(u)) + u)), None
        z, info = self.deq(lambda z: torch.tanh(self.cell(z) + u), torch.zeros_like(u))
        return self.head(z), info


def make_data(n: int, seed: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=gen)
    a = torch.randn(4, 2, generator=gen)
    return x, torch.sin(x @ a)


class TinyTask(Task):
    metric = "mse"
    resumable = frozenset({"stop_after", "save_every"})

    def __init__(self, cfg: TinyConfig) -> None:
        self.cfg = cfg
        self.steps = cfg.steps
        self.x, self.y = make_data(256, 123)
        self.vx, self.vy = make_data(64, 456)

    def build(self, accelerator: Any) -> Parts:
        model = TinyDEQModel(self.cfg.use_deq, self.cfg.dropout)
        optimizer = torch.optim.Adam(model.parameters(), lr=self.cfg.lr)
        return Parts(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + 0.01 * s)))

    def train_batches(self, start: int, accelerator: Any) -> Iterator[tuple[Tensor, Tensor]]:
        rank, world = accelerator.process_index, accelerator.num_processes
        step = start
        while True:
            idx = torch.randperm(256, generator=torch.Generator().manual_seed(step))[: self.cfg.batch_size]
            yield self.x[idx][rank::world], self.y[idx][rank::world]
            step += 1

    def forward(self, model: nn.Module, batch: Any, schedule: StepSchedule) -> Forward:
        x, y = batch
        out, info = model(x)
        loss = nn.functional.mse_loss(out, y)
        return Forward(loss, {"mse": float(loss.detach())}, info)

    def evaluate(self, model: nn.Module, split: str, accelerator: Any) -> dict[str, float]:
        out, info = model(self.vx)
        loss = float(nn.functional.mse_loss(out, self.vy))
        result = {"loss": loss, "mse": loss}
        if info is not None:
            result["nfe_forward"] = float(info.nfe)
        return result

    def describe(self) -> str:
        return "sin regression (256 pairs)"

    def baseline(self) -> str:
        return f"mse {float(self.vy.var(unbiased=False).mean()):.3f} (predicting 0)"


def run(cfg: TinyConfig, output_dir: Path, resume: bool = False) -> dict[str, Any]:
    return train(TinyTask(cfg), cfg, output_dir, resume=resume, name="tiny", progress=False)


if __name__ == "__main__":
    torch.set_num_threads(1)
    from deq_core.train.overrides import apply_overrides

    run(apply_overrides(TinyConfig(), sys.argv[2:]), Path(sys.argv[1]))
