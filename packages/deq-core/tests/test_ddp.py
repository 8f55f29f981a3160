"""The implicit backward under DistributedDataParallel: two CPU processes (gloo), each with half of the
batch, produce the same averaged gradients as one process on the whole batch."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import deq_core


class TinyDEQ(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inject = nn.Linear(5, 8, dtype=torch.float64)
        self.cell = nn.Linear(8, 8, bias=False, dtype=torch.float64)
        with torch.no_grad():
            self.cell.weight.mul_(0.5)
        self.head = nn.Linear(8, 1, dtype=torch.float64)
        self.deq = deq_core.DEQ(tol=1e-12, max_iter=200, backward=deq_core.Implicit(max_iter=200, tol=1e-12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.inject(x)
        z, _ = self.deq(lambda z: torch.tanh(self.cell(z) + u), torch.zeros_like(u))
        return self.head(z)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 5, generator=gen, dtype=torch.float64), torch.randn(8, 1, generator=gen, dtype=torch.float64)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def _worker(rank: int, world: int, out_dir: str) -> None:
    # A file rendezvous: no TCP port to pick, so no race with other processes on a busy machine.
    store = Path(out_dir) / "rendezvous"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        model = nn.parallel.DistributedDataParallel(TinyDEQ())
        x, y = _data()
        half = len(x) // world
        xs, ys = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
        nn.functional.mse_loss(model(xs), ys).backward()
        if rank == 0:
            torch.save(_grads(model.module), Path(out_dir) / "ddp_grads.pt")
        dist.barrier()
        # Both processes have left every gloo call once they pass this file barrier.
        _file_barrier(Path(out_dir), rank, world)
    except BaseException:
        dist.destroy_process_group()
        raise
    # Tearing gloo down (destroy_process_group, or the interpreter's exit running its destructors) while the peer
    # does the same aborts one of them now and then ("terminate called without an active exception", SIGABRT; seen
    # in CI even after both barriers). The gradients are on disk and both ranks are done: leave without running any
    # C++ destructor. Exit code 0 is what mp.spawn checks.
    os._exit(0)


def _file_barrier(folder: Path, rank: int, world: int, timeout_s: float = 120.0) -> None:
    """Wait until every rank has created its marker file in ``folder``."""
    (folder / f"left_gloo_{rank}").touch()
    deadline = time.monotonic() + timeout_s
    while not all((folder / f"left_gloo_{r}").exists() for r in range(world)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: the other processes did not finish within {timeout_s} s")
        time.sleep(0.01)


def test_ddp_gradients_match_single_process(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    ddp = torch.load(tmp_path / "ddp_grads.pt")

    model = TinyDEQ()
    x, y = _data()
    nn.functional.mse_loss(model(x), y).backward()
    single = _grads(model)
    assert len(ddp) == len(single)
    for a, b in zip(ddp, single):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-12), (a - b).abs().max()
