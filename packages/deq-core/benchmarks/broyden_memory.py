"""Broyden's memory: NFE and peak memory of deq-core's Broyden over memory sizes, next to TorchDEQ 0.1.0's Broyden.

Run: ``python packages/deq-core/benchmarks/broyden_memory.py [--quick] [--out FILE] [--seed N] [--threads N]``.

Problems (float32, z0 = 0, tol 1e-4 relative, max_iter 100):

- ``gauss-D-rho``: f(z) = tanh(z W^T + x), W = rho G with G a Gaussian D x D matrix normalized to spectral radius 1
  (its eigenvalues fill a disk: the hardest spectrum for Broyden and Anderson), x = 0.01 N(0, I) so that tanh' ~ 1
  and J_f(z*) ~ W: near-critical for rho 0.95 and 0.99. D = 16, 64, 256, 1024 (--quick: 16, 64), batch 8.
- the solver benchmark's problems (``problems.py``; not with --quick): the tanh layers with six or four outlying
  eigenvalues (rho(J_f(z*)) = 0.99 at most; the non-contractive 1.5 ones get max_iter 200), the transformer layer and
  the MDEQ-like conv layer.

Per problem and memory: NFE (calls of f counted by a wrapper; ``*``: not converged, true residual above tol) and the
peak memory of the solve (``deq_core.peak_live_bytes``: the largest total size of the tensors the solve created and
kept alive at once: the solver's buffers and f's temporaries, in units of the state's size B x D x 4 bytes). Memory
"default" is deq-core's default (every update of the solve kept: min(memory, max_iter) = max_iter). The script says
whether our default needs no more NFE than TorchDEQ's Broyden on every problem where TorchDEQ converges.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch
from solvers import broyden_float64, nfe_over_starts, paired_difference, run_ours, run_tdeq
from torch import Tensor

import deq_core
import problems as P

MEMORIES: tuple[int | None, ...] = (5, 10, 20, 40, None)
TOL = 1e-4
MAX_ITER = 100
# Starts per problem for the NFE comparison. 15 starts were too few: on conv they gave medians 48 / 47 (paired
# difference +0.6 ± 0.27 NFE) where 100 starts give 48 / 48 (+0.00 ± 0.11), a count whose per-start spread is ~1 NFE.
DRAWS = 100


def gauss_problem(dim: int, rho: float, batch: int = 8, seed: int = 0) -> P.Problem:
    """tanh(z W^T + x) with W = rho G / rho(G), G Gaussian (D x D), x = 0.01 N(0, I): rho(J_f(z*)) ~ rho."""
    gen = torch.Generator().manual_seed(seed + dim + round(1000 * rho))
    g = torch.randn(dim, dim, dtype=torch.float64, generator=gen)
    weight = (rho * g / torch.linalg.eigvals(g).abs().max()).float()
    x = (0.01 * torch.randn(batch, dim, dtype=torch.float64, generator=gen)).float()
    cell = P.TanhCell(weight)
    return P.Problem(
        name=f"gauss-{dim}-{rho:g}", f=lambda z: cell(z, x), z0=torch.zeros(batch, dim), max_iter=MAX_ITER,
        description=f"tanh(Wz+x), Gaussian disk of radius {rho:g}, D={dim}, B={batch}", cell=cell, x=x,
    )  # fmt: skip


def measure(problem: P.Problem, solve: Callable[[Callable[[Tensor], Tensor]], Tensor]) -> tuple[int, bool, float]:
    """(NFE, converged, peak KiB per sample) of one solve of ``problem``."""
    counted = P.Counted(problem.f)
    with torch.no_grad():
        z, peak = deq_core.peak_live_bytes(lambda: solve(counted))
    converged = float(P.true_residual(problem.f, z).max()) <= TOL
    return counted.calls, converged, peak / problem.z0.shape[0] / 1024


def row(problem: P.Problem, draws: int) -> tuple[list[object], bool]:
    """The table row of ``problem`` and whether our default needs <= TorchDEQ's NFE (median over ``draws`` perturbed
    starts; or TorchDEQ does not converge from z0 = 0)."""
    cells: list[object] = [problem.name]
    default_nfe = 0
    for memory in MEMORIES:
        opts = {} if memory is None else {"memory": memory}
        nfe, ok, peak = measure(problem, lambda f, o=opts: run_ours(f, problem.z0, "broyden", problem.max_iter, o))
        cells.append(f"{nfe}{'' if ok else '*'} / {peak:.0f}")
        default_nfe = nfe if memory is None else default_nfe
    nfe, ok, peak = measure(problem, lambda f: run_tdeq(f, problem.z0, "broyden", problem.max_iter, {}))
    cells.append(f"{nfe}{'' if ok else '*'} / {peak:.0f}")
    ours, tdeq = nfe_over_starts(problem, ("broyden", "broyden", "broyden", {}, {}), draws)
    median_ours, median_tdeq = P.median([float(n) for n in ours]), P.median([float(n) for n in tdeq])
    mean_diff, se_diff = paired_difference(ours, tdeq)
    _, ours64, tdeq64 = broyden_float64(problem)
    cells += [f"{P.fmt(median_ours)} / {P.fmt(median_tdeq)}", f"{mean_diff:+.2f} ± {se_diff:.2f}",
              f"{ours64} / {tdeq64}"]  # fmt: skip
    return cells, (median_ours <= median_tdeq or not ok)


def build_problems(quick: bool, seed: int) -> list[P.Problem]:
    dims = (16, 64) if quick else (16, 64, 256, 1024)
    out = [gauss_problem(dim, rho, seed=seed) for dim in dims for rho in (0.9, 0.95, 0.99)]
    if not quick:
        for kind, target, n_outliers in (("outlier", 0.99, 6), ("outlier", 1.5, 6), ("outlier", 0.99, 4)):
            max_iter = 100 if target < 1 else 200
            out.append(P.tanh_problem(kind, target, seed=seed, max_iter=max_iter, n_outliers=n_outliers))
        out += [P.transformer_problem(seed=seed), P.conv_problem(seed=seed)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = P.parse_args(__doc__ or "", argv)
    P.setup_torch(args.threads)
    rep = P.Report()
    draws = 3 if args.quick else DRAWS
    rep.add("## Broyden's memory: NFE and peak memory, deq-core vs TorchDEQ 0.1.0")
    rep.add()
    rep.add(
        f"torch {torch.__version__}, device {args.device}, {args.threads} thread(s), float32, tol {TOL:g} (rel), "
        f"z0 = 0, max_iter {MAX_ITER} (200 for the tanh-outlier-1.5 problem). Cells: NFE / peak memory of the solve "
        "in KiB per sample; `*`: not converged (true residual above tol). Ours: `memory` = 5, 10, 20, 40 (rank "
        "reduction to memory // 2 when full) and the default (every update kept); TorchDEQ: its default (every update "
        "kept, as two rows u, v each). Last columns: median NFE from "
        f"{draws} starts z0 = 1e-6 N(0, 1), the same for both (where the slowest sample's count is chaotic, float32 "
        "rounding moves a single start's count by tens of calls), and the mean ± standard error of the paired "
        "per-start difference ours - TorchDEQ; then both from z0 = 0 on a float64 copy of the problem, where rounding "
        "no longer separates equal methods."
    )
    rep.add()
    rows, fine = [], []
    for problem in (p.to(args.device) for p in build_problems(args.quick, args.seed)):
        cells, ok = row(problem, draws)
        rows.append(cells)
        fine.append((problem.name, ok))
        P.note(f"{problem.name}: {cells[1:]}")
    header = ["problem", *[f"ours memory={m}" if m is not None else "ours default" for m in MEMORIES], "TorchDEQ",
              "median NFE over starts, ours default / TorchDEQ", "paired NFE difference over starts, ours - TorchDEQ",
              "NFE float64, ours default / TorchDEQ"]  # fmt: skip
    rep.table(header, rows)
    worse = [name for name, ok in fine if not ok]
    verdict = "MET" if not worse else f"NOT MET ({', '.join(worse)})"
    rep.add()
    rep.add(f"- Our default Broyden needs <= TorchDEQ's median NFE wherever TorchDEQ converges: {verdict}.")
    rep.add(
        "- Storage per sample, C <= min(memory, max_iter) the room for factors (all of it up to 32, else 16 doubled "
        "as updates arrive): "
        "ours (C + 1) D values of directions (plus 2 (memory // 2) D after a rank reduction) and one C x C matrix "
        "(the factors' recursion), all in the state's dtype; TorchDEQ 2 max_iter D. Ours keeps less than TorchDEQ "
        "from D of about C up."
    )
    rep.write(args.out, P.command(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
