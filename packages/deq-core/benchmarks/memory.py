"""Training memory of the DEQ layer (implicit backward) vs an explicit weight-tied network of the same depth.

Run: ``python packages/deq-core/benchmarks/memory.py [--quick] [--out FILE] [--threads N]``.

Problems (``problems.py``): the transformer layer (d_model 64, seq 32, batch 8) and the MDEQ-like conv block
(32 x 16 x 16, batch 8). Depth N = 10, 20, 40 (``--quick``: 5, 10 and batch 4):

- explicit: z <- f(z) applied N times from z0 = 0 with ordinary backpropagation (weight-tied, unrolled);
- deq-core: ``deq_core.DEQ`` with N forward Anderson iterations (m=6; tol 1e-30 so that all N run), implicit
  backward with Broyden (30 iterations, its default memory);
- TorchDEQ: ``torchdeq.get_deq(core="indexing", ift=True)`` with the same solvers and limits (Anderson m=6
  forward, Broyden backward with b_max_iter=30, whose buffers keep all 30 updates).

One training step = forward, loss = mean(z^2), backward. Measured:

- saved for backward (``deq_core.saved_tensor_bytes``): the tensors autograd saves during the forward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``; the sum of the nbytes of their unique storages, excluding the
  parameters and the input injection x (which exist anyway). Tensors a custom autograd Function keeps as plain
  attributes of ``ctx`` are invisible to these hooks (deq-core's implicit layer keeps f(z*) this way), hence also:
- peak (``deq_core.peak_live_bytes``): the largest total size of live tensors allocated during the whole step
  (forward + backward), tracked by a ``TorchDispatchMode`` that records every new storage an ATen op creates and its
  release (weakref finalizer); tensors alive before the step (parameters, x) are not counted. It includes the solver
  buffers (Anderson/Broyden histories), f's temporaries and the backward solve. (torch.profiler's memory events
  cannot give this peak: frees inside an op, e.g. all of a custom backward's temporaries, are only reported netted at
  the op level.)
- solve peak: the same peak for the forward solver alone (under no_grad): the solver's buffers plus f's
  temporaries, i.e. the extra memory the DEQ needs besides what it saves for backward.

Ratios are DEQ / explicit at the same depth; the DEQ's numbers should not depend on N.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn

import deq_core
import problems as P

MB = 1024.0**2
B_MAX_ITER = 30


class Case:
    """One problem: a cell f(z, x), the injection x and the start z0."""

    def __init__(self, name: str, cell: nn.Module, x: Tensor) -> None:
        self.name, self.cell, self.x = name, cell, x
        self.z0 = torch.zeros_like(x)
        self.exclude = (*cell.parameters(), x)

    def f(self, z: Tensor) -> Tensor:
        return self.cell(z, self.x)


def explicit_forward(case: Case, depth: int) -> Callable[[], Tensor]:
    def run() -> Tensor:
        z = case.z0
        for _ in range(depth):
            z = case.f(z)
        return z

    return run


def ours_forward(
    case: Case, depth: int, tol: float = 1e-30, b_max_iter: int = B_MAX_ITER, b_tol: float = 1e-30
) -> Callable[[], Tensor]:
    deq = deq_core.DEQ(
        solver=deq_core.Anderson(m=6),
        max_iter=depth,
        tol=tol,
        backward=deq_core.Implicit(deq_core.Broyden(), max_iter=b_max_iter, tol=b_tol),
        on_nonfinite="ignore",
        warn_unconverged="never",  # the benchmark runs fixed iteration counts on purpose
    )

    def run() -> Tensor:
        z, _ = deq(case.f, case.z0)
        assert isinstance(z, Tensor)
        return z

    return run


def tdeq_forward(
    case: Case, depth: int, tol: float = 1e-30, b_max_iter: int = B_MAX_ITER, b_tol: float = 1e-30
) -> Callable[[], Tensor]:
    from torchdeq import get_deq

    deq = get_deq(
        core="indexing",
        ift=True,
        f_solver="anderson",
        f_max_iter=depth,
        f_tol=tol,
        f_stop_mode="rel",
        b_solver="broyden",
        b_max_iter=b_max_iter,
        b_tol=b_tol,
        b_stop_mode="rel",
    )
    deq.train()

    def run() -> Tensor:
        z_out, _ = deq(case.f, case.z0, solver_kwargs={"m": 6})
        return z_out[-1]

    return run


def ours_solve(case: Case, depth: int) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return deq_core.solve(case.f, case.z0, solver="anderson", max_iter=depth, tol=1e-30, m=6)

    return run


def tdeq_solve(case: Case, depth: int) -> Callable[[], object]:
    from torchdeq.solver import get_solver

    def run() -> object:
        with torch.no_grad():
            return get_solver("anderson")(case.f, case.z0, max_iter=depth, tol=1e-30, stop_mode="rel", m=6)

    return run


def training_step(case: Case, forward: Callable[[], Tensor]) -> Callable[[], None]:
    def run() -> None:
        case.cell.zero_grad(set_to_none=True)
        z = forward()
        z.square().mean().backward()

    return run


def grads(case: Case, forward: Callable[[], Tensor]) -> list[Tensor]:
    training_step(case, forward)()
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in case.cell.parameters()]


def rel_diff(a: list[Tensor], b: list[Tensor]) -> float:
    num = max(float((x - y).abs().max()) for x, y in zip(a, b))
    return num / max(float(x.abs().max()) for x in a)


def make_cases(quick: bool, seed: int, device: torch.device = P.CPU) -> list[Case]:
    batch = 4 if quick else 8
    gen = torch.Generator().manual_seed(seed + 3)
    x_tf = torch.randn(batch, 32, 64, generator=gen)
    x_conv = 1.5 * torch.randn(batch, 32, 16, 16, generator=gen)
    return [
        Case("transformer", P.transformer_cell(seed).to(device), x_tf.to(device)),
        Case("conv", P.conv_cell(seed).to(device), x_conv.to(device)),
    ]


def mb(x: float) -> str:
    return f"{x / MB:.2f}"


def main(argv: list[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    depths = (5, 10) if args.quick else (10, 20, 40)
    rep = P.Report()
    rep.add("## Training memory: DEQ (implicit backward) vs explicit weight-tied network")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, float32, depths {list(depths)}. Saved = unique storages "
        "saved for backward "
        "(saved_tensors_hooks, parameters and x excluded); peak = largest live tensor bytes during forward + "
        "backward (tracked per ATen op with a TorchDispatchMode); solve peak = the same for the no-grad forward "
        "solve alone. MiB."
    )
    rep.add()
    saved_rows, peak_rows, notes = [], [], []
    for case in make_cases(args.quick, args.seed, args.device):
        ours_saved, ours_peak = [], []
        for depth in depths:
            forwards = {
                "explicit": explicit_forward(case, depth),
                "ours": ours_forward(case, depth),
                "tdeq": tdeq_forward(case, depth),
            }
            saved, peak = {}, {}
            for key, fwd in forwards.items():
                training_step(case, fwd)()  # warm-up (first-call allocations, lazy init)
                case.cell.zero_grad(set_to_none=True)
                saved[key] = deq_core.saved_tensor_bytes(fwd, exclude=case.exclude)[1]  # the output is dropped at once
                peak[key] = deq_core.peak_live_bytes(training_step(case, fwd))[1]
            solve_ours = deq_core.peak_live_bytes(ours_solve(case, depth))[1]
            solve_tdeq = deq_core.peak_live_bytes(tdeq_solve(case, depth))[1]
            ours_saved.append(saved["ours"])
            ours_peak.append(peak["ours"])
            saved_rows.append(
                [case.name, depth, mb(saved["explicit"]), mb(saved["ours"]), mb(saved["tdeq"]),
                 P.fmt(saved["ours"] / saved["explicit"]), P.fmt(saved["tdeq"] / saved["explicit"])]
            )  # fmt: skip
            peak_rows.append(
                [case.name, depth, mb(peak["explicit"]), mb(peak["ours"]), mb(peak["tdeq"]),
                 P.fmt(peak["ours"] / peak["explicit"]), P.fmt(peak["tdeq"] / peak["explicit"]),
                 mb(solve_ours), mb(solve_tdeq)]
            )  # fmt: skip
            P.note(f"{case.name} depth {depth}: done")
        const_saved = max(ours_saved) == min(ours_saved)
        const_peak = max(ours_peak) <= 1.05 * min(ours_peak)
        notes.append(
            f"- `{case.name}`: deq-core's saved bytes constant over depths {list(depths)}: "
            f"{'yes' if const_saved else 'NO'} ({', '.join(mb(s) for s in ours_saved)} MiB); "
            f"peak within 5%: {'yes' if const_peak else 'NO'} ({', '.join(mb(s) for s in ours_peak)} MiB)."
        )
        settings = {"depth": 100, "tol": 1e-6, "b_max_iter": 100, "b_tol": 1e-7}
        g_ours = grads(case, ours_forward(case, **settings))
        g_tdeq = grads(case, tdeq_forward(case, **settings))
        notes.append(
            f"  Same-computation check: with converged solves (forward tol 1e-6, backward tol 1e-7, up to 100 "
            f"iterations each) the parameter gradients of deq-core and TorchDEQ differ by at most "
            f"{P.sci(rel_diff(g_ours, g_tdeq))} of the largest gradient entry."
        )
    rep.add("### Saved for backward (MiB)")
    rep.add()
    rep.table(
        ["problem", "depth", "explicit", "deq-core", "TorchDEQ", "deq-core/explicit", "TorchDEQ/explicit"], saved_rows
    )
    rep.add("### Peak live tensor memory of a training step (MiB)")
    rep.add()
    rep.table(
        ["problem", "depth", "explicit", "deq-core", "TorchDEQ", "deq-core/explicit", "TorchDEQ/explicit",
         "solve peak deq-core", "solve peak TorchDEQ"],
        peak_rows,
    )  # fmt: skip
    for line in notes:
        rep.add(line)
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
