"""Shared problem definitions and helpers for the deq-core benchmarks.

Every benchmark script in this folder imports this module (the folder is the script directory, so ``import problems``
works when a script is run as ``python packages/deq-core/benchmarks/<name>.py``).

Problems (all float32, batch first):

- ``tanh-*``: f(z) = tanh(z W^T + x), D = 512 per sample, batch 16 (``--quick``: D = 256, batch 8). W is scaled so
  that the spectral radius of the Jacobian J_f(z*) = diag(1 - tanh^2(W z* + x)) W at the fixed point z* equals a
  target (0.99: near-critical; 1.5: non-contractive). See :func:`tanh_problem` for the construction and calibration.
- ``transformer``: f(z) = LN2(z + FFN(LN1(z + Attn(z) + x))), causal self-attention, d_model 64, 4 heads, d_ff 256,
  seq 32, batch 8 (D = 2048 per sample).
- ``conv``: an MDEQ-like residual block, f(z) = GN3(relu(z + GN2(conv2(relu(GN1(conv1(z))))) + x)), 32 channels on a
  16 x 16 grid (D = 8192 per sample), batch 8.

Helpers: a counting wrapper for f, the true relative residual of a returned iterate, interleaved timing, Markdown
tables and the common command line (``--quick``, ``--out FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from deq_core.train.cli import add_device_argument
from deq_core.train.reports import MarkdownReport

# Fixed thread count for every benchmark. One thread, not two: on the 2-core CI-like machine, shared with other jobs,
# torch with 2 threads was measured 100x to 800x slower on small elementwise ops (an add of 65k floats: 6.6 ms with
# 2 threads vs 8 us with 1, while other processes kept the load at ~6), and batched LU of 512 x 512 matrices failed
# with MKL "DLASWP parameter 6" errors. Override with --threads.
THREADS = 1
CPU = torch.device("cpu")


def setup_torch(threads: int = THREADS) -> None:
    """Fix the number of threads; benchmarks never rely on the default."""
    torch.set_num_threads(threads)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Temporarily run torch with ``n`` threads."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# --------------------------------------------------------------------------------------------------------------------
# command line and output


def parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick, --out, --seed, --threads, --device (a script adds its own)."""
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes and repeats (CI smoke run, < 60 s)")
    parser.add_argument("--out", metavar="FILE", help="also write the Markdown report to FILE")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems (default 0)")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    add_device_argument(parser)
    return parser


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    return parser(description).parse_args(argv)


Report = MarkdownReport  # the benchmarks' reports: printed as they go, written to --out at the end


def command(script: str, argv: Sequence[str] | None) -> str:
    """The first line of a report: the command that wrote it, run from the repository's root, for the benchmark file
    ``script`` (its ``__file__``) with the arguments ``argv`` (None: the process's own)."""
    words = ["OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/" + Path(script).name]
    words += list(sys.argv[1:] if argv is None else argv)
    return f"Command: `{' '.join(words)}`"


def note(text: str) -> None:
    """Progress messages go to stderr so that stdout stays pure Markdown."""
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------------------
# measuring


class Counted:
    """Wraps f and counts its calls."""

    def __init__(self, f: Callable[[Tensor], Tensor]) -> None:
        self.f = f
        self.calls = 0

    def __call__(self, z: Tensor) -> Tensor:
        self.calls += 1
        return self.f(z)


@torch.no_grad()
def true_residual(f: Callable[[Tensor], Tensor], z: Tensor) -> Tensor:
    """Per-sample ||f(z) - z|| / ||f(z)||, recomputed from z (norms in float64)."""
    fz = f(z)
    diff = (fz - z).reshape(z.shape[0], -1).double()
    return torch.linalg.vector_norm(diff, dim=1) / torch.linalg.vector_norm(fz.reshape(z.shape[0], -1).double(), dim=1)


def synchronize() -> None:
    """Wait for the work queued on every CUDA device in use (a no-op on CPU), so that a wall clock read after it
    covers the work done before it."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Times of each function by ``clock`` (wall time by default), run round-robin ``repeats`` times (after ``warmup``
    untimed rounds); on CUDA each time includes the device's work (:func:`synchronize` before and after)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            synchronize()
            t0 = clock()
            fn()
            synchronize()
            dt = clock() - t0
            if r >= warmup:
                times[name].append(dt)
    return times


def work_clock(device: torch.device | str) -> Callable[[], float]:
    """The clock that times a run's own work: on the CPU with one torch thread, the CPU time of the calling thread
    (which does all the work), so that the time other processes of a shared machine hold the core is left out (here
    the wall time of one 2 ms solve was 2 ms or 120 ms, as the scheduler chose); elsewhere the wall clock."""
    if torch.device(device).type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def median_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the per-repeat ratios a_i / b_i (each pair measured next to each other)."""
    return statistics.median(x / y for x, y in zip(a, b))


def fmt(x: float, digits: int = 3) -> str:
    if x != x:
        return "nan"
    if math.isinf(x):
        return "inf"
    return f"{x:.{digits}g}"


def sci(x: float) -> str:
    if x != x:
        return "nan"
    if math.isinf(x):
        return "inf"
    return f"{x:.1e}"


# --------------------------------------------------------------------------------------------------------------------
# problems


@dataclass
class Problem:
    """A fixed-point problem z* = f(z*): f closes over the cell's parameters and the input injection."""

    name: str
    f: Callable[[Tensor], Tensor]
    z0: Tensor
    max_iter: int
    description: str
    cell: nn.Module | None = None
    x: Tensor | None = None
    facts: dict[str, str] = field(default_factory=dict)

    def to(self, device: torch.device) -> Problem:
        """The same problem with its cell, injection and start on ``device`` (the cell is moved in place)."""
        if self.cell is None or self.x is None:
            raise ValueError(f"problem {self.name} has no cell and injection to move")
        cell, x = self.cell.to(device), self.x.to(device)
        return dataclasses.replace(self, f=lambda z: cell(z, x), z0=self.z0.to(device), cell=cell, x=x)


# ---- tanh(W z + x) -------------------------------------------------------------------------------------------------


class TanhCell(nn.Module):
    """f(z, x) = tanh(z W^T + x)."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())

    def forward(self, z: Tensor, x: Tensor) -> Tensor:
        return torch.tanh(z @ self.weight.T + x)


def _newton_fixed_point(w: Tensor, x: Tensor, z: Tensor, iters: int = 100) -> Tensor:
    """z = tanh(z W^T + x) per sample by Newton's method with the exact Jacobian and a per-sample backtracking line
    search on ||tanh(z W^T + x) - z|| (float64)."""
    eye = torch.eye(w.shape[0], dtype=w.dtype)

    def residual(zz: Tensor) -> tuple[Tensor, Tensor]:
        t = torch.tanh(zz @ w.T + x)
        return t, t - zz

    t, g = residual(z)
    for _ in range(iters):
        norm = torch.linalg.vector_norm(g, dim=1)
        if float(norm.max()) <= 1e-12 * max(1.0, float(t.norm(dim=1).max())):
            return z
        jac = (1 - t**2)[:, :, None] * w[None]
        step = torch.linalg.solve(jac - eye, -g.unsqueeze(2)).squeeze(2)
        alpha = torch.ones_like(norm)
        for _ in range(30):
            t_new, g_new = residual(z + alpha[:, None] * step)
            bad = ~(torch.linalg.vector_norm(g_new, dim=1) <= (1 - 1e-4 * alpha) * norm)
            bad &= norm > 0
            if not bool(bad.any()):
                break
            alpha = torch.where(bad, alpha / 2, alpha)
        z = z + alpha[:, None] * step
        t, g = t_new, g_new
    res = float(torch.linalg.vector_norm(g, dim=1).max())
    raise RuntimeError(f"Newton did not find the fixed point of the tanh problem (residual {res:.2e})")


def _tanh_jacobian_eigs(w: Tensor, x: Tensor, z: Tensor) -> Tensor:
    t = torch.tanh(z @ w.T + x)
    return torch.linalg.eigvals((1 - t**2)[:, :, None] * w[None])  # (B, D) complex


def _rotation(radius: float, angle: float) -> Tensor:
    """2 x 2 real block with eigenvalues radius * exp(+-i angle)."""
    c, s = radius * math.cos(angle), radius * math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def tanh_problem(
    kind: str, target: float, quick: bool = False, seed: int = 0, max_iter: int = 100, n_outliers: int = 6
) -> Problem:
    """f(z) = tanh(z W^T + x) with rho(J_f(z*)) = ``target`` (max over the batch), D = 512, batch 16.

    Construction (float64, then cast to float32):

    - ``kind="gauss"``: W = s G with G a Gaussian matrix normalized to spectral radius 1; its eigenvalues fill a
      disk (circular law), so J has many eigenvalues near its spectral radius, in every direction. The injection is
      small, x = 0.01 N(0, I) (0.001 for targets > 1: with a disk of radius > 1 some eigenvalues of W lie near 1, so
      the fixed point z* ~ (I - W)^{-1} x leaves the near-linear regime and Newton loses the branch for larger x);
      tanh' ~ 1 at z* and the spectrum of W sets rho. For targets > 1, G is redrawn (from the same seeded generator)
      while an eigenvalue of target * G lies within 0.02 of 1, where I - J would be singular.
    - ``kind="outlier"`` (a more realistic spectrum, as seen in trained DEQs): W = 0.5 G + s Q B Q^T, a bulk of
      radius 0.5 plus a rank-6 part with orthonormal Q (D x 6) and B = blockdiag(R(1, 0.3), -0.95, R(0.9, 1.2), 0.8)
      (R(r, a) a 2 x 2 block with eigenvalues r e^{+-ia}): six outlying eigenvalues near s e^{+-0.3i}, -0.95 s,
      0.9 s e^{+-1.2i} and 0.8 s (``n_outliers=4``: without the pair at 0.9 s e^{+-1.2i}, named
      ``tanh-outlier4-*``). The leading pair is complex: a positive real outlier at 0.99 would make I - J nearly
      singular, push z* ~ (I - W)^{-1} x far into the saturated region of tanh and cap rho(J_f(z*)) below 0.99 (we
      measured a maximum of 0.979 along the branch). Injection x = 0.1 N(0, I); tanh' at z* varies between samples,
      so rho(J_f(z*)) differs between samples and from rho(W): the problem is genuinely nonlinear.

    Calibration: for the current s, the fixed point z*(s) of every sample is found by Newton's method (exact
    Jacobian, warm-started from the previous s, so it follows one branch of fixed points), then rho(J_f(z*)) is
    computed exactly with torch.linalg.eigvals. Starting at s = 0.97 target (gauss: s = target), s grows in steps
    of at most 3% until max_batch rho(s) crosses the target, then the secant method inside the bracket finds s with
    max_batch rho(s) = target to 5e-4 (relative). (rho(s) is not monotonic: a larger outlier pushes z* into the
    saturated region of tanh, so the first crossing is taken.) The min/median/max over the batch are recorded.
    """
    dim, batch = (256, 8) if quick else (512, 16)
    gen = torch.Generator().manual_seed(seed + (0 if kind == "gauss" else 1000) + int(1000 * target))
    with num_threads(1):  # exact eigenvalues and batched LU: one thread is faster here (and MKL's batched LU
        # with 2 threads failed with "DLASWP parameter 6" errors on this machine)
        for _ in range(100):
            g = torch.randn(dim, dim, dtype=torch.float64, generator=gen)
            eig = torch.linalg.eigvals(g)
            g = g / eig.abs().max()
            # gauss, target > 1: redraw G while an eigenvalue of target * G lies within 0.02 of 1
            if kind != "gauss" or target <= 1 or float((target * eig / eig.abs().max() - 1).abs().min()) >= 0.02:
                break
        if kind == "gauss":
            x_scale = 0.01 if target <= 1 else 0.001
            base, part = torch.zeros_like(g), g
        elif kind == "outlier":
            x_scale = 0.1
            if n_outliers not in (4, 6):
                raise ValueError(f"n_outliers must be 4 or 6, got {n_outliers}")
            q, _ = torch.linalg.qr(torch.randn(dim, n_outliers, dtype=torch.float64, generator=gen))
            blk = torch.zeros(n_outliers, n_outliers, dtype=torch.float64)
            blk[0:2, 0:2] = _rotation(1.0, 0.3)
            blk[2, 2] = -0.95
            blk[-1, -1] = 0.8
            if n_outliers == 6:
                blk[3:5, 3:5] = _rotation(0.9, 1.2)
            base, part = 0.5 * g, q @ blk @ q.T
        else:
            raise ValueError(f"unknown kind {kind!r}")
        x = x_scale * torch.randn(batch, dim, dtype=torch.float64, generator=gen)

        z = torch.zeros(batch, dim, dtype=torch.float64)
        lo: tuple[float, float] | None = None  # (s, rho) with rho < target
        hi: tuple[float, float] | None = None  # (s, rho) with rho > target
        s = 0.97 * target if kind == "outlier" else target
        for _ in range(25):
            w = base + s * part
            z = _newton_fixed_point(w, x, z)
            rho = _tanh_jacobian_eigs(w, x, z).abs().max(dim=1).values
            r = float(rho.max())
            if abs(r / target - 1) < 5e-4:
                break
            if r < target:
                lo = (s, r)
            else:
                hi = (s, r)
            if lo is not None and hi is not None:  # secant inside the bracket (first crossing from below)
                s = lo[0] + (target - lo[1]) * (hi[0] - lo[0]) / (hi[1] - lo[1])
            elif r < target:  # small continuation steps upward, so that Newton follows one branch
                s *= min(1.03, target / r)
            else:
                s *= max(0.97, target / r)
        else:
            raise RuntimeError(
                f"calibration of tanh-{kind} to rho={target} did not converge (rho={r:.4f} at s={s:.4f}); "
                "try another --seed"
            )
    w32, x32 = w.float(), x.float()
    cell = TanhCell(w32)
    facts = {
        "scale s": f"{s:.4f}",
        "injection scale": f"{x_scale:g}",
        "rho(J) at Newton fixed point (exact, min/median/max over batch)": (
            f"{float(rho.min()):.4f} / {float(rho.median()):.4f} / {float(rho.max()):.4f}"
        ),
    }
    name = f"tanh-{kind}{'' if kind == 'gauss' or n_outliers == 6 else n_outliers}-{target:g}"
    spectrum = "Gaussian disk" if kind == "gauss" else f"bulk 0.5 + {n_outliers} outliers"
    desc = f"tanh(Wz+x), {spectrum}, D={dim}, B={batch}"
    problem = Problem(
        name=name,
        f=lambda zz: cell(zz, x32),
        z0=torch.zeros(batch, dim),
        max_iter=max_iter,
        description=desc,
        cell=cell,
        x=x32,
        facts=facts,
    )
    return problem


# ---- transformer layer ---------------------------------------------------------------------------------------------


class TransformerCell(nn.Module):
    """f(z, x) = LN2(z + FFN(LN1(z + Attn(z) + x))), self-attention with ``n_heads`` heads; z, x: (B, T, d)."""

    def __init__(self, d_model: int = 64, n_heads: int = 4, d_ff: int = 256, causal: bool = False) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True, bias=True)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.causal = causal

    def forward(self, z: Tensor, x: Tensor) -> Tensor:
        mask = None
        if self.causal:
            t = z.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=z.device), diagonal=1)
        a = self.attn(z, z, z, attn_mask=mask, need_weights=False)[0]
        h = self.ln1(z + a + x)
        return self.ln2(z + self.ff(h))


def transformer_cell(seed: int = 0, gain: float = 1.5, d_model: int = 64, causal: bool = True) -> TransformerCell:
    """A randomly initialized transformer cell; every weight matrix multiplied by ``gain`` after PyTorch's default
    init. With gain 1.5 (seed 0) rho(J_f(z*)) is about 0.94 and plain iteration converges to 1e-4 in ~95 steps."""
    torch.manual_seed(seed)
    cell = TransformerCell(d_model=d_model, causal=causal)
    with torch.no_grad():
        for p in cell.parameters():
            if p.dim() == 2:
                p.mul_(gain)
    return cell


def transformer_problem(quick: bool = False, seed: int = 0, max_iter: int = 100) -> Problem:
    batch, seq, d = (4, 32, 64) if quick else (8, 32, 64)
    cell = transformer_cell(seed)
    gen = torch.Generator().manual_seed(seed + 7)
    x = torch.randn(batch, seq, d, generator=gen)
    return Problem(
        name="transformer",
        f=lambda z: cell(z, x),
        z0=torch.zeros(batch, seq, d),
        max_iter=max_iter,
        description=f"LN(z+FFN(LN(z+Attn(z)+x))), causal, d=64, T={seq}, B={batch} (D={seq * d})",
        cell=cell,
        x=x,
    )


# ---- MDEQ-like conv block ------------------------------------------------------------------------------------------


class ConvCell(nn.Module):
    """f(z, x) = GN3(relu(z + GN2(conv2(relu(GN1(conv1(z))))) + x)); z, x: (B, C, H, W)."""

    def __init__(self, channels: int = 32, groups: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(groups, channels)
        self.gn2 = nn.GroupNorm(groups, channels)
        self.gn3 = nn.GroupNorm(groups, channels)

    def forward(self, z: Tensor, x: Tensor) -> Tensor:
        y = torch.relu(self.gn1(self.conv1(z)))
        y = self.gn2(self.conv2(y))
        return self.gn3(torch.relu(z + y + x))


def conv_cell(seed: int = 0, channels: int = 32) -> ConvCell:
    torch.manual_seed(seed)
    return ConvCell(channels=channels)


def conv_problem(quick: bool = False, seed: int = 0, max_iter: int = 100) -> Problem:
    batch, c, hw = (4, 32, 16) if quick else (8, 32, 16)
    cell = conv_cell(seed, c)
    gen = torch.Generator().manual_seed(seed + 11)
    x = 1.5 * torch.randn(batch, c, hw, hw, generator=gen)
    return Problem(
        name="conv",
        f=lambda z: cell(z, x),
        z0=torch.zeros(batch, c, hw, hw),
        max_iter=max_iter,
        description=f"MDEQ-like GN/conv residual block, {c}x{hw}x{hw} (D={c * hw * hw}), B={batch}",
        cell=cell,
        x=x,
    )
