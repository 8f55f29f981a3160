"""Anderson acceleration (type II, difference form of Walker & Ni 2011), batched with per-sample mixing.

With g(z) = f(z) - z and the last n <= m - 1 differences dZ_i = z_{i+1} - z_i, dG_i = g_{i+1} - g_i:

    gamma   = argmin_gamma ||g_k - dG gamma||^2           (regularized, scale-free normal equations)
    z_{k+1} = z_k + beta g_k - (dZ + beta dG) gamma

The least-squares problem is solved through its normal equations after scaling every column of dG to unit norm, with
a ridge term ``reg`` relative to that unit scale (not an absolute constant), so the regularization neither dominates
at small residuals nor depends on the units of z. The small n x n systems are solved in float64. A sample whose
system is singular or gives non-finite weights takes a plain damped step instead (gamma = 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._run import SolveRun


def _mixing_weights(gram: Tensor, rhs: Tensor, reg: float) -> Tensor:
    """gamma (B, n) solving the normal equations (gram + ridge) gamma = rhs; gram (B, n, n), rhs (B, n).

    Columns are scaled to unit norm (Jacobi scaling) and the system is solved in float64, so that ``reg`` is
    relative to the scale of the differences and the solve stays accurate when they are nearly parallel.
    """
    gram, rhs = gram.double(), rhs.double()
    scale = torch.diagonal(gram, dim1=1, dim2=2).clamp_min(0).sqrt()  # column norms, (B, n)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = gram / (scale.unsqueeze(2) * scale.unsqueeze(1))
    eye = torch.eye(gram.shape[1], dtype=gram.dtype, device=gram.device)
    y, info = torch.linalg.solve_ex(scaled + reg * eye, (rhs / scale).unsqueeze(2))
    gamma = y.squeeze(2) / scale
    ok = (info == 0) & torch.isfinite(gamma).all(dim=1)
    return torch.where(ok[:, None], gamma, torch.zeros_like(gamma))


def check_options(*, m: int, beta: float, reg: float) -> None:
    """Raise ValueError for option values :func:`anderson` cannot use."""
    if isinstance(m, bool) or not (isinstance(m, int) and m >= 1):
        raise ValueError(f"anderson: m (history size) must be an int >= 1, got {m!r}.")
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"anderson: beta must be in (0, 1], got {beta}.")
    if not reg >= 0.0:
        raise ValueError(f"anderson: reg must be >= 0, got {reg}.")


def anderson(run: SolveRun, x0: Tensor, *, m: int = 8, beta: float = 1.0, reg: float = 1e-8) -> None:
    """Anderson acceleration.

    Args:
        m: history size, the number of past (z, f(z)) pairs mixed (m - 1 differences); m = 1 is damped iteration.
        beta: mixing parameter in (0, 1]: 1 mixes the f(z) values, smaller values damp toward the z values.
        reg: ridge term relative to the unit-normalized normal equations (>= 0).
    """
    check_options(m=m, beta=beta, reg=reg)
    batch, dim = x0.shape
    slots = m - 1
    step_hist = x0.new_zeros(batch, max(slots, 1), dim)  # dZ_i + beta dG_i, the columns the step subtracts
    dg_hist = x0.new_zeros(batch, max(slots, 1), dim)
    gram = x0.new_zeros(batch, max(slots, 1), max(slots, 1))  # dg_i . dg_j, updated one row per iteration
    x, _, gx = run.evaluate(x0)
    k = 0  # differences stored so far
    while not run.finished:
        step = torch.add(x, gx, alpha=beta)
        n = min(k, slots)
        if n > 0:
            rhs = torch.bmm(gx.unsqueeze(1), dg_hist[:, :n].transpose(1, 2)).squeeze(1)  # (B, n)
            gamma = _mixing_weights(gram[:, :n, :n], rhs, reg).to(x.dtype).unsqueeze(1)  # (B, 1, n)
            step = step.sub_(torch.bmm(gamma, step_hist[:, :n]).squeeze(1))
        x_new, _, g_new = run.evaluate(run.freeze(step, x))
        if slots > 0:
            slot = k % slots
            torch.sub(g_new, gx, out=dg_hist[:, slot])
            torch.sub(x_new, x, out=step_hist[:, slot])
            step_hist[:, slot].add_(dg_hist[:, slot], alpha=beta)
            k += 1
            n = min(k, slots)
            row = torch.bmm(dg_hist[:, slot].unsqueeze(1), dg_hist[:, :n].transpose(1, 2)).squeeze(1)  # (B, n)
            gram[:, slot, :n] = row
            gram[:, :n, slot] = row
        x, gx = x_new, g_new
