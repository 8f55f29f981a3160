"""Anderson acceleration (type II, difference form of Walker & Ni 2011), batched with per-sample mixing.

With g(z) = f(z) - z and the last n <= m - 1 differences dZ_i = z_{i+1} - z_i, dG_i = g_{i+1} - g_i:

    gamma   = argmin_gamma ||g_k - dG gamma||^2           (regularized, scale-free normal equations)
    z_{k+1} = z_k + beta g_k - (dZ + beta dG) gamma

The least-squares problem is solved through its normal equations with a ridge term ``reg`` relative to each
column's scale (reg diag(dG^T dG), the ridge reg I of the system with columns scaled to unit norm; not an absolute
constant), so the regularization neither dominates at small residuals nor depends on the units of z. The small
n x n systems are solved in float64. A sample whose system is singular or gives non-finite weights takes a plain
damped step instead (gamma = 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._options import check_int, check_number
from ._run import SolveRun

_TINY = torch.finfo(torch.float64).tiny


def _mixing_weights(gram: Tensor, rhs: Tensor, reg: float) -> Tensor:
    """gamma (B, n) solving the normal equations (gram + reg diag(gram)) gamma = rhs; gram (B, n, n), rhs (B, n),
    float64.

    The ridge reg diag(gram) is the ridge reg I of the system whose columns are scaled to unit norm (Jacobi scaling:
    S (A + reg diag(A)) S = S A S + reg I with S = diag(A)^(-1/2)), so ``reg`` is relative to the scale of each
    difference, without forming the scaled system. A zero column (a difference of a frozen sample) gets a tiny
    diagonal and a zero weight.
    """
    system = gram.clone()
    system.diagonal(dim1=1, dim2=2).mul_(1 + reg).add_(_TINY)
    gamma, info = torch.linalg.solve_ex(system, rhs.unsqueeze(2))
    gamma = gamma.squeeze(2)
    ok = (info == 0) & (gamma.sum(dim=1).abs() < float("inf"))  # the sum is NaN or Inf if any weight is
    return torch.where(ok[:, None], gamma, 0.0)


def check_options(*, m: int, beta: float, reg: float) -> None:
    """Raise TypeError / ValueError for option types / values :func:`anderson` cannot use."""
    check_int("anderson", "m", m, 1)
    if not 0.0 < check_number("anderson", "beta", beta) <= 1.0:
        raise ValueError(f"anderson: beta must be in (0, 1], got {beta}.")
    if not check_number("anderson", "reg", reg) >= 0.0:
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
    slots = min(m, run.max_iter) - 1  # a solve stores at most max_iter - 1 differences: no larger buffer is needed
    width = max(slots, 1)
    # Rows 0..slots-1: the differences dG_i; row ``width``: the current g, so that one batched product over the rows
    # gives both the new row of the Gram matrix (dG_new . dG_j) and the next right-hand side (g . dG_j).
    dg_hist = x0.new_zeros(batch, width + 1, dim)
    # dZ_i + beta dG_i = differences of z + beta g (of f(z) when beta = 1), the columns the step subtracts
    step_hist = x0.new_zeros(batch, width, dim)
    gram = torch.zeros(batch, width, width, dtype=torch.float64, device=x0.device)  # dG_i . dG_j, one row per step
    rhs = gram.new_zeros(batch, 0)  # dG_j . g for the current g
    x, fx, gx = run.evaluate(x0)
    base = fx if beta == 1.0 else torch.add(x, gx, alpha=beta)  # z + beta g: the step before mixing
    k = 0  # differences stored so far
    while not run.finished:
        n = min(k, slots)
        if n > 0:
            gamma = _mixing_weights(gram[:, :n, :n], rhs, reg).to(x.dtype).unsqueeze(1)  # (B, 1, n)
            step = torch.baddbmm(base.unsqueeze(1), gamma, step_hist[:, :n], alpha=-1).squeeze(1)
            step = run.freeze(step, x, owned=True)
        else:
            step = run.freeze(base, x)
        x_new, fx_new, g_new = run.evaluate(step)
        base_new = fx_new if beta == 1.0 else torch.add(x_new, g_new, alpha=beta)
        if slots > 0:
            slot = k % slots
            torch.sub(g_new, gx, out=dg_hist[:, slot])
            torch.sub(base_new, base, out=step_hist[:, slot])
            dg_hist[:, width].copy_(g_new)
            k += 1
            n = min(k, slots)
            pair = dg_hist[:, slot :: width - slot]  # rows slot and width: (B, 2, D), no copy
            prod = torch.bmm(pair, dg_hist[:, :n].transpose(1, 2)).double()  # (B, 2, n)
            gram[:, slot, :n] = prod[:, 0]
            gram[:, :n, slot] = prod[:, 0]
            rhs = prod[:, 1]
        x, gx, base = x_new, g_new, base_new
