"""The cost of weight normalization per call of f, and what ``deq_core.cached_weights`` saves.

Run: ``python packages/deq-core/benchmarks/weight_norm.py [--quick] [--out FILE] [--threads N]``.

Cells, with torch's weight_norm parametrization (``deq_core.weight_norm``) on every conv / linear weight:

- ``conv``: the MDEQ-like block of ``problems.ConvCell`` (two 3x3 convs, 32 channels, 16 x 16, batch 8);
- ``linear``: f(z) = tanh(W2 relu(W1 z + b1) + x), D = 256, hidden 1024, batch 16 (weights scaled by 0.5 so that the
  map is contractive);
- ``linear-small``: the same cell with batch 1, where f itself is cheap and the per-call cost of the parametrization
  (a norm over the weight and a Python-level module call) weighs most.

For each cell, one DEQ training step: ``deq_core.DEQ`` with 30 forward iterations (fixed-point, tol 1e-30 so that all
30 run) plus the tracked call f(z*), then ``loss.backward()`` through the implicit backward (30 fixed-point
iterations of vector-Jacobian products). Two variants, timed interleaved (median of per-repeat ratios):

- plain: the weight is recomputed, w = g v / ||v||, on every call of f;
- cached: the step runs inside ``with deq_core.cached_weights(cell):``, which computes each weight once (with
  autograd) for all calls.

The table shows how many times the weight-norm parametrizations ran, the time ratio cached / plain, and the largest
difference between the gradients (all parameters and the injection x) of the two variants, relative to the
largest gradient entry.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor, nn

import deq_core
import problems as P

ITERS = 30


class LinearCell(nn.Module):
    """f(z, x) = tanh(W2 relu(W1 z + b1) + x)."""

    def __init__(self, dim: int = 256, hidden: int = 1024, gain: float = 0.5) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        with torch.no_grad():
            self.fc1.weight.mul_(gain)
            self.fc2.weight.mul_(gain)

    def forward(self, z: Tensor, x: Tensor) -> Tensor:
        return torch.tanh(self.fc2(torch.relu(self.fc1(z))) + x)


def make_cells(quick: bool, seed: int, device: torch.device = P.CPU) -> list[tuple[str, nn.Module, Tensor, str]]:
    cells = []
    conv = P.conv_cell(seed)
    deq_core.weight_norm(conv.conv1)
    deq_core.weight_norm(conv.conv2)
    batch = 4 if quick else 8
    gen = torch.Generator().manual_seed(seed + 1)
    cells.append(("conv", conv, 1.5 * torch.randn(batch, 32, 16, 16, generator=gen), "32x16x16"))
    for name, batch in (("linear", 8 if quick else 16), ("linear-small", 1)):
        torch.manual_seed(seed)
        lin = LinearCell()
        deq_core.weight_norm(lin.fc1)
        deq_core.weight_norm(lin.fc2)
        cells.append((name, lin, torch.randn(batch, 256, generator=gen), "256 (hidden 1024)"))
    return [(name, cell.to(device), x.to(device), dim) for name, cell, x, dim in cells]


class ParamCounter:
    """Counts the forward calls of every parametrization module of a cell."""

    def __init__(self, cell: nn.Module) -> None:
        self.calls = 0
        for sub in cell.modules():
            if hasattr(sub, "parametrizations"):
                for plist in sub.parametrizations.values():
                    for p in plist:
                        p.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.calls += 1


def training_step(cell: nn.Module, x: Tensor, cached: bool) -> tuple[dict[str, Tensor], Tensor]:
    """One forward + backward of the DEQ; returns the gradients (parameters by name, and x)."""
    deq = deq_core.DEQ(
        solver="fixed_point",
        max_iter=ITERS,
        tol=1e-30,
        backward=deq_core.Implicit("fixed_point", max_iter=ITERS, tol=1e-30),
        warn_unconverged="never",  # fixed iteration counts on purpose
    )
    cell.zero_grad(set_to_none=True)
    xx = x.detach().clone().requires_grad_()
    z0 = torch.zeros_like(x)
    if cached:
        with deq_core.cached_weights(cell):
            z, _ = deq(lambda z: cell(z, xx), z0)
    else:
        z, _ = deq(lambda z: cell(z, xx), z0)
    loss = z.square().mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in cell.named_parameters() if p.grad is not None}
    assert xx.grad is not None
    return grads, xx.grad.detach().clone()


def max_rel_diff(a: tuple[dict[str, Tensor], Tensor], b: tuple[dict[str, Tensor], Tensor]) -> float:
    ga, xa = a
    gb, xb = b
    if set(ga) != set(gb):
        return float("inf")
    diffs = [float((ga[k] - gb[k]).abs().max()) for k in ga] + [float((xa - xb).abs().max())]
    scale = max([float(t.abs().max()) for t in ga.values()] + [float(xa.abs().max())])
    return max(diffs) / scale


def main(argv: list[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    repeats = 3 if args.quick else 9
    rep = P.Report()
    rep.add("## Weight normalization: recomputed per call vs `deq_core.cached_weights`")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s), float32. One DEQ "
        "training step: "
        f"{ITERS} forward fixed-point iterations + the tracked call f(z*), then backward with {ITERS} adjoint "
        f"iterations. {repeats} interleaved repeats; ratio = median of per-repeat ratios cached/plain."
    )
    rep.add()
    rows = []
    for name, cell, x, dim in make_cells(args.quick, args.seed, args.device):
        counter = ParamCounter(cell)
        counter.calls = 0
        plain = training_step(cell, x, cached=False)
        n_plain = counter.calls
        counter.calls = 0
        cached = training_step(cell, x, cached=True)
        n_cached = counter.calls
        diff = max_rel_diff(plain, cached)
        times = P.interleaved(
            {
                "plain": lambda cell=cell, x=x: training_step(cell, x, False),
                "cached": lambda cell=cell, x=x: training_step(cell, x, True),
            },
            repeats=repeats,
        )
        ratio = P.median_ratio(times["cached"], times["plain"])
        saved = 1 - ratio
        rows.append([name, dim, x.shape[0], n_plain, n_cached, P.fmt(ratio), f"{100 * saved:.1f}%", P.sci(diff)])
        P.note(f"{name}: done")
    header = [
        "cell", "D", "batch", "weight computations plain", "cached", "time cached/plain", "time saved",
        "max grad diff (rel.)",
    ]  # fmt: skip
    rep.table(header, rows)
    ok = all(float(r[-1]) <= 1e-5 for r in rows)
    rep.add(
        f"Gradients equal between the two variants (max relative difference <= 1e-5): {'yes' if ok else 'NO'}. "
        "Weight computations count the calls of the weight-norm parametrizations (two weights per cell)."
    )
    rep.write(args.out, P.command(__file__, argv))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
