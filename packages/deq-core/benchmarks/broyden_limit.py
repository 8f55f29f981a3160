"""Broyden's cost against its iteration limit: a solve that stops by tolerance after the same iterations should cost
the same whatever max_iter allows. Time and peak memory of deq-core's Broyden over max_iter, next to TorchDEQ 0.1.0's.

Run: ``python packages/deq-core/benchmarks/broyden_limit.py [--quick] [--out FILE] [--threads N]``.

Problem: f(z) = tanh(z W^T + x), D = 256, batch 32, W Gaussian scaled to spectral norm 0.95, x ~ N(0, I), float32,
z0 = 0, rel tol 1e-4; both solvers with their default memory (every update kept) stop by tolerance after the same
iterations at every limit. Per limit: NFE, median wall time over repeats interleaved across the limits, per solver
(so drift on a shared machine hits every limit alike), and the peak memory of the solve
(``deq_core.peak_live_bytes``: the largest total size of the tensors the solve created and kept alive at once).
Ratios: each side against its own max_iter = 12 run, and ours / TorchDEQ at the same limit.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence

import torch
from solvers import tdeq_solver
from torch import Tensor

import deq_core
import problems as P

LIMITS = (12, 200, 1000, 3000)
QUICK_LIMITS = (12, 200, 1000)
TOL = 1e-4
DIM, BATCH, NORM = 256, 32, 0.95
# The targets: at the largest limit, within this factor of max_iter 12 (time and peak memory)
WITHIN = 1.2


def tanh_problem(seed: int) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    """f and z0 = 0 of the problem above (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(DIM, DIM, generator=gen)
    w = NORM * w / torch.linalg.matrix_norm(w, ord=2)
    x = torch.randn(BATCH, DIM, generator=gen)
    return (lambda z: torch.tanh(z @ w.T + x)), torch.zeros(BATCH, DIM)


def solve_ours(f: Callable[[Tensor], Tensor], z0: Tensor, max_iter: int) -> tuple[Tensor, int]:
    res = deq_core.solve(f, z0, solver="broyden", max_iter=max_iter, tol=TOL, stop_mode="rel")
    return res.z, res.nfe  # type: ignore[return-value]


@torch.no_grad()
def solve_tdeq(f: Callable[[Tensor], Tensor], z0: Tensor, max_iter: int) -> tuple[Tensor, int]:
    counted = P.Counted(f)
    z, _, _ = tdeq_solver("broyden")(counted, z0, max_iter=max_iter, tol=TOL, stop_mode="rel")
    return z, counted.calls


def main(argv: Sequence[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    limits = QUICK_LIMITS if args.quick else LIMITS
    repeats = 3 if args.quick else 11
    f, z0 = tanh_problem(args.seed)
    rep = P.Report()
    rep.add("## Broyden's cost against max_iter at a fixed number of iterations, deq-core vs TorchDEQ 0.1.0")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, {args.threads} thread(s), float32, D = {DIM}, batch {BATCH}, tanh(W z + x) with "
        f"||W||_2 = {NORM}, rel tol {TOL:g}, z0 = 0; median time of {repeats} interleaved repeats; peak memory of the "
        "solve in MiB. Ratios `/12`: against the same solver at max_iter 12."
    )
    rep.add()
    sides = {"ours": solve_ours, "tdeq": solve_tdeq}
    # One round-robin over the limits per solver: drift on a shared machine hits every limit alike. The two solvers
    # are timed apart: right after TorchDEQ frees its large buffers, the next solve in the process runs slower
    # (fresh pages), which would charge TorchDEQ's allocations to whichever solve follows them.
    times: dict[str, list[float]] = {}
    for name, solve in sides.items():
        runs = {f"{name}@{limit}": (lambda s=solve, n=limit: s(f, z0, n)) for limit in limits}
        times.update(P.interleaved(runs, repeats))
    measured: list[dict[str, tuple[float, int, int]]] = []  # per limit, per side: (median time s, peak bytes, NFE)
    ours_z = []
    for limit in limits:
        cells = {}
        for name, solve in sides.items():
            (z, nfe), peak = deq_core.peak_live_bytes(lambda solve=solve, n=limit: solve(f, z0, n))
            cells[name] = (statistics.median(times[f"{name}@{limit}"]), peak, nfe)
            if name == "ours":
                ours_z.append(z)
        measured.append(cells)
        P.note(f"max_iter {limit}: {cells}")
    base = measured[0]
    mib = 2.0**20
    rows = []
    for limit, cells in zip(limits, measured, strict=True):
        (t_o, m_o, n_o), (t_t, m_t, n_t) = cells["ours"], cells["tdeq"]
        rows.append([
            limit, f"{n_o} / {n_t}",
            f"{t_o * 1e3:.2f} ms ({t_o / base['ours'][0]:.2f}x)", f"{t_t * 1e3:.2f} ms ({t_t / base['tdeq'][0]:.2f}x)",
            f"{t_o / t_t:.2f}",
            f"{m_o / mib:.2f} ({m_o / base['ours'][1]:.2f}x)", f"{m_t / mib:.2f} ({m_t / base['tdeq'][1]:.2f}x)",
            f"{m_o / m_t:.2f}",
        ])  # fmt: skip
    rep.table(
        ["max_iter", "NFE ours / TorchDEQ", "time ours (/12)", "time TorchDEQ (/12)", "time ours / TorchDEQ",
         "peak MiB ours (/12)", "peak MiB TorchDEQ (/12)", "peak ours / TorchDEQ"],
        rows,
    )  # fmt: skip
    time_ratio = measured[-1]["ours"][0] / base["ours"][0]
    mem_ratio = measured[-1]["ours"][1] / base["ours"][1]
    within = time_ratio <= WITHIN and mem_ratio <= WITHIN
    worse = [
        limit
        for limit, cells in zip(limits, measured, strict=True)
        if cells["ours"][0] > cells["tdeq"][0] or cells["ours"][1] > cells["tdeq"][1]
    ]
    same = all(torch.equal(z, ours_z[0]) for z in ours_z)
    rep.add()
    rep.add(
        f"- Ours at max_iter {limits[-1]} within {WITHIN}x of max_iter {limits[0]} (time {time_ratio:.2f}x, peak "
        f"memory {mem_ratio:.2f}x): {'MET' if within else 'NOT MET'}."
    )
    verdict = "MET" if not worse else f"NOT MET (max_iter {', '.join(map(str, worse))})"
    rep.add(f"- Ours no slower and no larger than TorchDEQ at every limit: {verdict}.")
    rep.add(f"- Our iterates bit-identical at every limit: {'yes' if same else 'NO'}.")
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
