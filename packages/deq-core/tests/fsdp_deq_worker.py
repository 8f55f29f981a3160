"""Run by ``torchrun --nproc_per_node 2`` from test_fsdp.py (not a test module): a small DEQ (Anderson forward,
implicit Broyden backward, float64) trained one step under torch's FSDP on CPU over gloo, the whole model one FSDP
unit, for each of FSDP1 (``FullyShardedDataParallel``) and FSDP2 (``fully_shard``). Rank 0 prints one JSON line per
mode: the largest difference between the gathered gradients and those of one process on the whole batch, and the
names of the gathered full state dict."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch import nn

import deq_core


class SmallDEQ(nn.Module):
    """z* = tanh(W z* / 2 + U x), logits = V z*: x (B, 4) -> (B, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.inject, self.cell, self.head = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
        backward = deq_core.Implicit(deq_core.Broyden(), max_iter=40, tol=1e-12)
        self.deq = deq_core.DEQ(solver=deq_core.Anderson(m=4), max_iter=40, tol=1e-12, backward=backward)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.inject(x)
        z, _ = self.deq(lambda z: torch.tanh(0.5 * self.cell(z) + u), torch.zeros_like(u))
        return self.head(z)


def main() -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.randn(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for mode in ("fsdp1", "fsdp2"):
        torch.manual_seed(0)
        reference = SmallDEQ().double()
        model = SmallDEQ().double()
        model.load_state_dict(reference.state_dict())
        nn.functional.mse_loss(reference(x), y).backward()
        if mode == "fsdp1":
            model = FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=True)
        else:
            fully_shard(model)
        nn.functional.mse_loss(model(x.chunk(2)[rank]), y.chunk(2)[rank]).backward()  # FSDP averages the halves
        if mode == "fsdp1":
            with FullyShardedDataParallel.summon_full_params(model, with_grads=True):
                grads = {n.removeprefix("_fsdp_wrapped_module."): p.grad.clone() for n, p in model.named_parameters()}
        else:
            grads = {n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                     for n, p in model.named_parameters()}  # fmt: skip
        saved = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            worst = max(float((grads[n] - p.grad).abs().max()) for n, p in reference.named_parameters())
            print(json.dumps({"mode": mode, "grad_diff": worst, "keys": sorted(saved)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
