"""Limited-memory "good" Broyden method for the root of g(z) = f(z) - z, batched per sample.

The inverse Jacobian of g is approximated as H = -I + sum_i u_i v_i^T with at most ``memory`` rank-one terms, so
memory and time per step do not grow with max_iter. When all slots are used, the low-rank part is replaced by its
best approximation of rank memory // 2 (Broyden rank reduction, van de Rotten & Verduyn Lunel 2003): dropping single
old terms instead makes the iteration diverge, and restarting from -I loses the curvature learned so far (on the
non-contractive benchmark problem: 138 calls of f to converge with restarts, 68 with rank reduction).
Each iteration takes the quasi-Newton step z <- z - s H g(z) and applies the Sherman-Morrison update

    u = (dz - H dg) / (dz^T H dg),    v = H^T dz.

The product p = H g(z_k) is carried from one iteration to the next, so a step costs two passes over the buffers
(H g(z_{k+1}) and H^T dz); the three dot products of the update come from one small batched Gram product.
With ``line_search`` the step length s is halved (at most ``ls_steps`` times) for the samples whose residual norm
did not decrease enough (Armijo condition on ||g||^2); every trial is a counted call of f.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._run import SolveRun, _runs, rowwise_copies


def _apply(us: Tensor, vs: Tensor, x: Tensor) -> Tensor:
    """H x = -x + U (V^T x) per sample; us, vs (B, M, D) (the M stored terms), x (B, D)."""
    if us.shape[1] == 0:
        return -x
    coef = torch.bmm(x.unsqueeze(1), vs.transpose(1, 2))  # (B, 1, M)
    return torch.bmm(coef, us).squeeze(1) - x


def _apply_transposed(us: Tensor, vs: Tensor, x: Tensor) -> Tensor:
    """H^T x = -x + V (U^T x) per sample."""
    return _apply(vs, us, x)


def _orthonormal_factor(rows: Tensor) -> tuple[Tensor, Tensor]:
    """For rows (B, M, D) spanning a subspace, (R, C) with rows^T = Q R, Q = rows^T C orthonormal (D x M).

    From the Gram matrix rows rows^T = E L E^T (float64, M x M): R = L^(1/2) E^T and C = E L^(-1/2); directions with
    eigenvalues below a relative cutoff are dropped (their columns of C are zero), so rank deficiency is harmless.
    """
    gram = torch.bmm(rows, rows.transpose(1, 2)).double()
    evals, evecs = torch.linalg.eigh(gram)
    cutoff = evals.amax(dim=1, keepdim=True).clamp_min(0) * (64 * torch.finfo(rows.dtype).eps)
    keep = evals > cutoff
    root = torch.where(keep, evals.clamp_min(0).sqrt(), torch.zeros_like(evals))
    inv_root = torch.where(keep, 1 / root.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(evals))
    return root.unsqueeze(2) * evecs.transpose(1, 2), evecs * inv_root.unsqueeze(1)


def _reduce_rank(us: Tensor, vs: Tensor, keep: int) -> int:
    """Replace sum_i u_i v_i^T (rows of us, vs: (B, M, D)) by its best rank-``keep`` approximation, in place, in the
    first slots (the rest zeroed); returns the number of slots kept (``keep``, or D when D is smaller).

    With U^T = Qu Ru and V^T = Qv Rv (orthonormal Q from the M x M Gram matrices) and the small SVD Ru Rv^T = P S Y^T,
    the best approximation is (Qu P_k S_k)(Qv Y_k)^T: the new rows are (S_k P_k^T Cu^T) U and (Y_k^T Cv^T) V. Cost:
    four batched (M x D) products and M x M eigen/SVD problems, once every memory - keep iterations.
    """
    keep = min(keep, us.shape[2])  # the rank is at most min(D, M)
    if keep == 0:
        us.zero_()
        vs.zero_()
        return 0
    r_u, c_u = _orthonormal_factor(us)
    r_v, c_v = _orthonormal_factor(vs)
    left, sing, right_t = torch.linalg.svd(torch.bmm(r_u, r_v.transpose(1, 2)))  # (B, M, M)
    coef_u = (sing[:, :keep, None] * left[:, :, :keep].transpose(1, 2)) @ c_u.transpose(1, 2)  # (B, keep, M)
    coef_v = right_t[:, :keep] @ c_v.transpose(1, 2)  # (B, keep, M)
    new_u = torch.bmm(coef_u.to(us.dtype), us)
    new_v = torch.bmm(coef_v.to(vs.dtype), vs)
    us.zero_()
    vs.zero_()
    us[:, :keep] = new_u
    vs[:, :keep] = new_v
    return keep


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.vecdot(a, b)


def _apply_into(us: Tensor, vs: Tensor, x: Tensor, out: Tensor) -> Tensor:
    """out = H x = -x + U (V^T x) (as :func:`_apply`), written into ``out`` (B, D); us, vs (B, M, D) with M >= 1."""
    coef = torch.bmm(x.unsqueeze(1), vs.transpose(1, 2))  # (B, 1, M)
    torch.baddbmm(x.unsqueeze(1), coef, us, beta=-1, out=out.unsqueeze(1))
    return out


def check_options(*, memory: int, line_search: bool, ls_steps: int, armijo: float) -> None:
    """Raise ValueError for option values :func:`broyden` cannot use."""
    if isinstance(memory, bool) or not (isinstance(memory, int) and memory >= 1):
        raise ValueError(f"broyden: memory must be an int >= 1, got {memory!r}.")
    if not isinstance(line_search, bool):
        raise ValueError(f"broyden: line_search must be True or False, got {line_search!r}.")
    if isinstance(ls_steps, bool) or not (isinstance(ls_steps, int) and ls_steps >= 0):
        raise ValueError(f"broyden: ls_steps must be an int >= 0, got {ls_steps!r}.")
    if not 0.0 < armijo < 0.5:
        raise ValueError(f"broyden: armijo must be in (0, 0.5), got {armijo}.")


def broyden(
    run: SolveRun,
    x0: Tensor,
    *,
    memory: int = 20,
    line_search: bool = False,
    ls_steps: int = 3,
    armijo: float = 1e-4,
) -> None:
    """Limited-memory Broyden.

    Args:
        memory: number of rank-one updates kept (>= 1); when full, reduced to the dominant memory // 2.
        line_search: backtrack on the step length when ||f(z) - z|| does not decrease enough.
        ls_steps: the most halvings per iteration when ``line_search`` is on.
        armijo: sufficient-decrease constant of the Armijo condition.
    """
    check_options(memory=memory, line_search=line_search, ls_steps=ls_steps, armijo=armijo)
    batch, dim = x0.shape
    us = x0.new_zeros(batch, memory, dim)
    vs = x0.new_zeros(batch, memory, dim)
    # work rows: dg = g_{k+1} - g_k, v = H_k^T dz, g_{k+1}; their Gram matrix gives v.dg, |v|, |dg| and v.g_{k+1}.
    work = x0.new_empty(batch, 3, dim)
    dg, v_new, g_copy = work.unbind(1)
    eps = torch.finfo(x0.dtype).eps
    x, _, gx = run.evaluate(x0)
    p = -gx  # H g with H = -I
    k = 0
    while not run.finished:
        x_new, fx_new = _step(run, x, gx, p, line_search, ls_steps, armijo)
        x_new, _, g_new = run.evaluate(x_new, fx_new)
        dx = x_new - x
        torch.sub(g_new, gx, out=dg)
        g_copy.copy_(g_new)
        if k == memory:  # buffer full: keep the dominant half of the low-rank part (Broyden rank reduction)
            k = _reduce_rank(us, vs, keep=memory // 2)
            p = _apply(us[:, :k], vs[:, :k], gx)
        if k == 0:
            q = -g_new
            torch.neg(dx, out=v_new)
        else:
            q = _apply_into(us[:, :k], vs[:, :k], g_new, torch.empty_like(g_new))  # H_k g_{k+1}
            _apply_into(vs[:, :k], us[:, :k], dx, v_new)  # H_k^T dx
        gram = torch.bmm(work[:, :2], work.transpose(1, 2))  # (B, 2, 3): rows dg, v against dg, v, g_{k+1}
        denom, v_g = gram[:, 1, 0], gram[:, 1, 2]
        tiny = eps * gram[:, 0, 0].clamp_min(0).sqrt() * gram[:, 1, 1].clamp_min(0).sqrt()  # eps |dg| |v|
        ok = run.active & (denom.abs() > tiny) & torch.isfinite(denom)
        safe = torch.where(ok, denom, torch.ones_like(denom))
        u = us[:, k]
        torch.sub(dx, q.sub(p), out=u)  # dx - H_k dg
        u.div_(safe[:, None])
        vs[:, k].copy_(v_new)
        _zero_rows(~ok, us[:, k], vs[:, k])
        k += 1
        p = torch.addcmul(q, u, v_g.masked_fill(~ok, 0)[:, None])  # H_{k+1} g_{k+1}
        x, gx = x_new, g_new


def _zero_rows(mask: Tensor, *bufs: Tensor) -> None:
    """Set the rows of ``bufs`` (B, D) where ``mask`` (B,) holds to zero by assignment, not arithmetic (a NaN or Inf
    there is overwritten, not multiplied)."""
    if rowwise_copies(mask):
        rows = [i for i, bad in enumerate(mask.tolist()) if bad]
        for a, b in _runs(rows):
            for buf in bufs:
                buf[a:b].zero_()
        return
    for buf in bufs:
        buf.masked_fill_(mask[:, None], 0.0)


def _step(
    run: SolveRun, x: Tensor, gx: Tensor, p: Tensor, line_search: bool, ls_steps: int, armijo: float
) -> tuple[Tensor, Tensor | None]:
    """The next iterate x - s p, with f evaluated there when the line search already did so."""
    x_new = run.freeze(x - p, x, owned=True)
    if not line_search or ls_steps == 0:
        return x_new, None
    phi0 = _dot(gx, gx)
    step = torch.ones_like(phi0)
    fx_new = run.call(x_new)
    for _ in range(ls_steps):
        g_try = fx_new - x_new
        phi = _dot(g_try, g_try)
        retry = run.active & ~(phi <= (1 - 2 * armijo * step) * phi0)  # non-finite phi also retries
        if not bool(retry.any()):
            break
        step = torch.where(retry, step / 2, step)
        x_try = torch.where(retry[:, None], x - step[:, None] * p, x_new)
        fx_try = run.call(x_try)
        x_new = x_try
        fx_new = torch.where(retry[:, None], fx_try, fx_new)
    return x_new, fx_new
