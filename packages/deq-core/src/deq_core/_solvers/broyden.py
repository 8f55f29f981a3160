"""Limited-memory "good" Broyden method for the root of g(z) = f(z) - z, batched per sample, in product form.

Here H approximates the inverse of I - J_f, so that the Newton step is z <- z + H g; H_0 = I gives the plain
fixed-point step. Each iteration steps along d = H g (z <- z + lam d, lam = 1 unless the line search shortens the
step), evaluates g there and applies the good-Broyden update (s = lam d, y = g_old - g_new, q = H g_new):

    H <- (I + a s^T) H,    a = (s - H y) / (s^T H y).

Since H y = d - q, the update only needs q, which the next direction needs anyway. Writing the directions d_0, d_1, ...
as rows, the factor of update j is I + (b1_j d_{j+1} + b0_j d_j) d_j^T / |d_j|^2 with b1_j = 1 and b0_j = lam_j - 1
(both 0 when the update is skipped), and the next direction is

    d_{j+1} = (1 + rho) q + rho (lam_j - 1) d_j,    rho = d_j.q / (|d_j|^2 - d_j.q)

(the implementation of Broyden's method that stores only the steps, Kelley, "Iterative Methods for Linear and
Nonlinear Equations", SIAM 1995; here extended to step lengths lam != 1).
So only the directions are stored, one row per update, instead of the two rows u, v of the additive form
H = I + sum u v^T, whose v = H^T s costs an extra pass over the history. Applying the F stored factors to a vector w
is one batched pass to get t = D w, a small lower-triangular solve for the coefficients e_j = d_j.w_j / |d_j|^2 of
the factors applied one after another (float64; the Gram matrix D D^T is kept up to date with the same pass), and
one batched pass to add D^T h: two passes over the history per iteration. With ``compile_step=True`` the first pass
and the small algebra (:func:`_update_kernel`) run through torch.compile with dynamic shapes (the history grows by a
row per update); the second pass stays eager, in place.

Limited memory (only when ``memory`` is set below max_iter; by default every update of the solve is kept: full
Broyden, no reduction): once the stored updates reach ``memory``, the whole low-rank part of H
is replaced by its best approximation of rank memory // 2 (Broyden rank reduction, van de Rotten & Verduyn Lunel
2003), kept in the additive form H_base = I + sum u_i v_i^T under the factors that follow: dropping single old terms
instead makes the iteration diverge, and restarting from H = I loses the curvature learned so far. The reduction
works on small Gram matrices kept up to date (float64) and two passes over the rows. Storage grows with the updates
made, never with the iteration limit: with F updates stored, about F + 1 direction rows (allocated 16 at first, then
doubled as needed, at most memory + 1) and 2 (memory // 2) rows for the base once reduced, each of the state's size
(the additive form needs 2 memory), and three (F + 1) x (F + 1) float64 matrices per sample. A solve that stops by
tolerance after 10 iterations costs the same at max_iter 12 and 3000 (benchmarks/broyden_limit.py).
With ``line_search`` the step length is halved (at most ``ls_steps`` times) for the samples whose residual norm did
not decrease enough (Armijo condition on ||g||^2); every trial is a counted call of f.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ._options import check_int, check_number
from .base import Loop, Solver, Step

# Direction rows allocated when a solve starts; the buffers double from there as updates arrive.
_FIRST_ROWS = 16
# What one update's kernel returns: Gram row, row of tri, update made, lam - 1, scale, coef (see _update_kernel)
_KernelOut = tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor, Tensor]


def _orthonormal_factor(gram: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """For M rows (of one sample, batched) with Gram matrix ``gram`` (B, M, M, float64): (R, C) with rows^T = Q R,
    Q = rows^T C orthonormal (D x M).

    From gram = E L E^T: R = L^(1/2) E^T and C = E L^(-1/2); directions with eigenvalues below a relative cutoff
    (set by the precision ``dtype`` of the rows) are dropped (their columns of C are zero), so rank deficiency is
    harmless.
    """
    evals, evecs = torch.linalg.eigh(gram)
    cutoff = evals.amax(dim=1, keepdim=True).clamp_min(0) * (64 * torch.finfo(dtype).eps)
    keep = evals > cutoff
    root = torch.where(keep, evals.clamp_min(0).sqrt(), torch.zeros_like(evals))
    inv_root = torch.where(keep, 1 / root.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(evals))
    return root.unsqueeze(2) * evecs.transpose(1, 2), evecs * inv_root.unsqueeze(1)


def _best_low_rank(gram_u: Tensor, gram_v: Tensor, keep: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Coefficients (B, keep, M) of the best rank-``keep`` approximation of sum_i u_i v_i^T, for M rows u_i, v_i
    (of one sample, batched) known through their Gram matrices (B, M, M, float64): the approximation is
    sum_k (sum_i cu_ki u_i)(sum_i cv_ki v_i)^T.

    With U^T = Qu Ru and V^T = Qv Rv (orthonormal Q, see :func:`_orthonormal_factor`) and the small SVD
    Ru Rv^T = P S Y^T, the best approximation is (Qu P_k S_k)(Qv Y_k)^T: cu = S_k P_k^T Cu^T, cv = Y_k^T Cv^T.
    """
    r_u, c_u = _orthonormal_factor(gram_u, dtype)
    r_v, c_v = _orthonormal_factor(gram_v, dtype)
    left, sing, right_t = torch.linalg.svd(torch.bmm(r_u, r_v.transpose(1, 2)))  # (B, M, M)
    coef_u = (sing[:, :keep, None] * left[:, :, :keep].transpose(1, 2)) @ c_u.transpose(1, 2)
    coef_v = right_t[:, :keep] @ c_v.transpose(1, 2)
    return coef_u, coef_v


class _InverseJacobian:
    """H = P_{F-1} ... P_0 H_base for one batch.

    Stored: the directions d_0..d_F as rows of ``dirs`` (B, memory + 1, D; row F + 1 is work space for the next
    direction); their Gram matrix G (float64, lower triangle); the bidiagonal ``bidiag`` (B, memory + 1, memory) with
    columns (b0_j at row j, b1_j at row j + 1), so that factor j is I + (D^T bidiag_j) d_j^T / |d_j|^2; the
    lower-triangular ``tri`` = N - L of the coefficient recursion, N = diag |d_j|^2 and L = tril(G bidiag, -1),
    one row added per update. H_base = I + sum_i u_i v_i^T (rank r, 0 until the first reduction): rows of
    ``base_u``, ``base_v`` (B, r, D), with their Gram matrices. ``factors + r`` never exceeds ``memory``.
    """

    def __init__(self, x0: Tensor, memory: int) -> None:
        batch, dim = x0.shape
        self.memory = memory
        self.keep = min(memory // 2, dim)  # rank of H_base after a reduction
        # Storage follows the updates made, not the limit: room for _FIRST_ROWS directions at first, doubled as
        # updates arrive (_reserve), never more than memory + 1 rows.
        rows = min(memory + 1, _FIRST_ROWS)
        self.dirs = x0.new_empty(batch, rows, dim)  # every row is written before it is read
        small = dict(dtype=torch.float64, device=x0.device)
        self.gram = torch.zeros(batch, rows, rows, **small)
        self.bidiag = torch.zeros(batch, rows, rows - 1, **small)
        self.tri = torch.zeros(batch, rows, rows, **small)
        self.base_u = x0.new_zeros(batch, 0, dim)
        self.base_v = x0.new_zeros(batch, 0, dim)
        self.gram_u = torch.zeros(batch, 0, 0, **small)
        self.gram_v = torch.zeros(batch, 0, 0, **small)
        self._limit = 1 / (4 * torch.finfo(x0.dtype).eps)  # |rho| above this: the update is (numerically) singular
        self.factors = 0

    def _reserve(self, rows: int) -> None:
        """Make room for ``rows`` direction rows (and the small matrices that go with them): the buffers grow to at
        least twice their size, at most memory + 1 rows. The rows written so far (d_0..d_F) and the small matrices
        move to the new buffers; the rest is left unwritten, as at the start."""
        have = self.dirs.shape[1]
        if rows <= have:
            return
        grown = min(max(rows, 2 * have), self.memory + 1)
        written = self.factors + 1
        dirs = self.dirs.new_empty(self.dirs.shape[0], grown, self.dirs.shape[2])
        dirs[:, :written] = self.dirs[:, :written]
        self.dirs = dirs
        self.gram = _grown(self.gram, grown, grown)
        self.bidiag = _grown(self.bidiag, grown, grown - 1)
        self.tri = _grown(self.tri, grown, grown)

    @property
    def direction(self) -> Tensor:
        """The newest direction d_F, (B, D) (a view into the buffer)."""
        return self.dirs[:, self.factors]

    @property
    def full(self) -> bool:
        return self.factors + self.base_u.shape[1] >= self.memory

    def set_direction(self, g: Tensor) -> None:
        """Start over from H_base: d_0 = H_base g, no factors."""
        self.factors = 0
        self.bidiag.zero_()
        self._apply_base(g, self.dirs[:, 0])

    def _apply_base(self, g: Tensor, out: Tensor) -> None:
        """out = H_base g = g + sum_i u_i (v_i . g); out (B, D), possibly a strided view."""
        out.copy_(g)
        if self.base_u.shape[1]:
            coef = torch.bmm(g.unsqueeze(1), self.base_v.transpose(1, 2))  # (B, 1, r)
            out.unsqueeze(1).baddbmm_(coef, self.base_u)

    def _add_gram_row(self, n: int, row: Tensor) -> None:
        """Record G_{n, :n+1} = ``row`` (B, n + 1) and the row of ``tri`` it completes."""
        self.gram[:, n, : n + 1] = row
        self._set_tri_row(n, row, _tri_row(row, self.bidiag[:, : n + 1, :n]))

    def _set_tri_row(self, n: int, row: Tensor, tri_row: Tensor) -> None:
        """Write row n of ``tri``: ``tri_row`` (B, n) below the diagonal, |d_n|^2 = row[:, n] on it."""
        self.tri[:, n, :n] = tri_row
        # |d_n|^2 = 0 only when update n will be skipped (its bidiag column zero): any nonzero value keeps e_n harmless
        norm2 = row[:, n]
        self.tri[:, n, n] = torch.where(norm2 > 0, norm2, 1.0)

    def update(
        self, g_new: Tensor, lam: Tensor | None, active: Tensor, kernel: Callable[..., _KernelOut] | None = None
    ) -> None:
        """From q = H g_new (the current H), append the Broyden update of the step lam d_F and write the next direction
        d_{F+1} = H_new g_new. ``lam``: (B,) step lengths (None: all 1); ``active``: (B,) bool, samples still
        iterating (the update of the others is skipped). ``kernel``: the tensor work on the history,
        :func:`_update_kernel` (the default) or its compiled version."""
        n = self.factors
        self._reserve(n + 2)
        work = self.dirs[:, n + 1]  # the row of the next direction
        self._apply_base(g_new, work)  # w = H_base g_new
        kernel = kernel or _update_kernel
        row, tri_row, ok, lam_m1, scale, coef = kernel(
            self.dirs[:, : n + 2], self.bidiag[:, : n + 1, :n], self.tri[:, :n, :n], lam, active, self._limit
        )
        # d_{n+1} = scale w + D^T coef, in place (the second pass over the history)
        work.mul_(scale[:, None])
        work.unsqueeze(1).baddbmm_(coef.unsqueeze(1), self.dirs[:, : n + 1])
        self.gram[:, n, : n + 1] = row
        self._set_tri_row(n, row, tri_row)
        self.bidiag[:, n + 1, n] = ok
        if lam_m1 is not None:
            self.bidiag[:, n, n] = lam_m1
        self.factors = n + 1

    def reduce(self, g: Tensor) -> None:
        """Replace H - I by its best rank-``keep`` approximation as the new H_base, then start over: d_0 = H_base g.

        With F factors on a base of rank r, H - I = (P - I) H_base + (H_base - I) and P - I = D^T K D_{<F}
        (K = Bidiag (N - L)^{-1}, (F + 1) x F), so H - I = sum over M = r + F rows of left^T right with
            left = [u_i; (K^T D)_j],    right = [v_i; d_j + sum_i (d_j . u_i) v_i]    (j < F).
        Their Gram matrices follow from the Gram matrices kept (directions, u, v) and the dots of the directions
        with u and v (two passes over F + 1 rows), so the rows are never formed: the new base rows are combinations
        of u, v and the directions, written in two passes.
        """
        n, r = self.factors, self.base_u.shape[1]
        if self.keep == 0:  # memory 1 (or D = 1): nothing to keep, restart from H = I
            self.set_direction(g)
            return
        self._reserve(n + 1 + self.keep)  # the new u rows are staged after the directions (= memory + 1 rows)
        dtype = self.dirs.dtype
        rows = self.dirs[:, : n + 1]
        self._add_gram_row(n, torch.bmm(self.dirs[:, n : n + 1], rows.transpose(1, 2)).double()[:, 0])
        low = torch.tril(self.gram[:, : n + 1, : n + 1])
        gram = low + torch.tril(low, diagonal=-1).transpose(1, 2)
        eye = torch.eye(n, dtype=torch.float64, device=g.device).expand(g.shape[0], n, n)
        inv_tri = torch.linalg.solve_triangular(self.tri[:, :n, :n], eye, upper=False)
        k_mat = self.bidiag[:, : n + 1, :n] @ inv_tri  # (B, n + 1, n)
        gram_left_new = k_mat.transpose(1, 2) @ gram @ k_mat  # (K^T D)(K^T D)^T
        gram_right_new = gram[:, :n, :n]
        if r:
            d_u = torch.bmm(rows, self.base_u.transpose(1, 2)).double()  # (B, n + 1, r)
            d_v = torch.bmm(rows[:, :n], self.base_v.transpose(1, 2)).double()  # (B, n, r)
            c = d_u[:, :n]  # right rows d_j + sum_i c_ji v_i
            k_du = k_mat.transpose(1, 2) @ d_u  # (K^T D) . u
            gram_left = torch.cat(
                [torch.cat([self.gram_u, k_du.transpose(1, 2)], 2), torch.cat([k_du, gram_left_new], 2)], 1
            )
            v_c = self.gram_v @ c.transpose(1, 2)  # (B, r, n): v . (c V)
            v_right = d_v.transpose(1, 2) + v_c  # v_i . right_j
            right_right = gram_right_new + c @ d_v.transpose(1, 2) + d_v @ c.transpose(1, 2) + c @ v_c
            gram_right = torch.cat(
                [torch.cat([self.gram_v, v_right], 2), torch.cat([v_right.transpose(1, 2), right_right], 2)], 1
            )
        else:
            gram_left, gram_right = gram_left_new, gram_right_new
        # a sample whose rows overflowed keeps no low-rank part (its H restarts from I); LAPACK must not see it
        finite = (gram_left.sum((1, 2)) + gram_right.sum((1, 2))).isfinite()[:, None, None]
        gram_left = torch.where(finite, gram_left, 0.0)
        gram_right = torch.where(finite, gram_right, 0.0)
        coef_u, coef_v = _best_low_rank(gram_left, gram_right, self.keep, dtype)  # (B, keep, r + n)
        # new u = coef_u[:, :, :r] u + (coef_u[:, :, r:] K^T) D; new v = (coef_v[:, :, :r] + coef_v[:, :, r:] c) v
        # + coef_v[:, :, r:] D_{<F}. Neither may overwrite rows it reads: the first reduction writes both to new
        # buffers; later ones write new u to the unused direction rows, new v over the old u, then new u over the old v.
        coef_du = (coef_u[:, :, r:] @ k_mat.transpose(1, 2)).to(dtype)
        coef_dv = coef_v[:, :, r:].to(dtype)
        if r == 0:
            new_u = torch.bmm(coef_du, rows)
            new_v = torch.bmm(coef_dv, rows[:, :n])
        else:
            staged = self.dirs[:, n + 1 : n + 1 + self.keep]  # n + 1 + keep = memory + 1 rows
            torch.bmm(coef_du, rows, out=staged)
            staged.baddbmm_(coef_u[:, :, :r].to(dtype), self.base_u)
            new_v = self.base_u
            torch.bmm(coef_dv, rows[:, :n], out=new_v)
            new_v.baddbmm_((coef_v[:, :, :r] + coef_v[:, :, r:] @ c).to(dtype), self.base_v)
            new_u = self.base_v.copy_(staged)
        new_u.masked_fill_(~finite, 0.0)
        new_v.masked_fill_(~finite, 0.0)
        self.base_u, self.base_v = new_u, new_v
        self.gram_u = coef_u @ gram_left @ coef_u.transpose(1, 2)
        self.gram_v = coef_v @ gram_right @ coef_v.transpose(1, 2)
        self.set_direction(g)


def _grown(small: Tensor, rows: int, cols: int) -> Tensor:
    """``small`` (B, r, c) copied into the top-left corner of a zero (B, rows, cols) matrix of its dtype."""
    out = small.new_zeros(small.shape[0], rows, cols)
    out[:, : small.shape[1], : small.shape[2]] = small
    return out


def _tri_row(row: Tensor, bidiag: Tensor) -> Tensor:
    """Row n of ``tri`` below its diagonal, -(G_{n, :n+1} bidiag), (B, n), from the Gram row ``row`` (B, n + 1) of
    d_n and the first n columns ``bidiag`` (B, n + 1, n)."""
    return torch.bmm(row.unsqueeze(1), bidiag).squeeze(1).neg_()


def _update_kernel(
    rows: Tensor, bidiag: Tensor, tri: Tensor, lam: Tensor | None, active: Tensor, limit: float
) -> _KernelOut:
    """The coefficients of one Broyden update (:meth:`_InverseJacobian.update`), for F = n factors stored: the next
    direction is d_{n+1} = (1 + rho) (w + D^T h) + rho (lam - 1) d_n = scale w + D^T coef.

    Args:
        rows: (B, n + 2, D) the directions d_0..d_n, then w = H_base g_new (read only).
        bidiag: (B, n + 1, n) and tri: (B, n, n), float64: the first n columns of the factors' coefficients and the
            lower-triangular N - L of their recursion.
        lam: (B,) step lengths of the last step, or None (all 1); active: (B,) bool, samples still iterating.
        limit: |rho| above this means a (numerically) singular update, which is skipped.

    Returns:
        The Gram row of d_n (B, n + 1) and the row of ``tri`` below its diagonal (B, n), both float64; whether the
        update was made (B,) bool; lam - 1 where it was (0 elsewhere; None when ``lam`` is None); ``scale`` (B,) and
        ``coef`` (B, n + 1) in the rows' dtype.

    One pass over the history (the batched product of the rows d_n and w with d_0..d_n: the Gram row of d_n and
    t = D w) and small float64 algebra; shapes grow with n, so torch.compile runs it with dynamic shapes. It writes
    nothing: the second pass, adding D^T coef to w in place, is left to the caller (an in-place write into an input
    would make the compiled graph copy the whole history).
    """
    history = rows[:, :-1]
    prod = torch.bmm(rows[:, -2:], history.transpose(1, 2)).double()  # (B, 2, n + 1): rows d_n and w
    row, t = prod[:, 0], prod[:, 1]
    # coefficients e of the factors applied in turn (tri is (N - L) of the first n), then q = w + D^T h, h = bidiag e
    e = torch.linalg.solve_triangular(tri, t[:, :-1, None], upper=False)  # (B, n, 1)
    h = torch.bmm(bidiag, e).squeeze(2)  # (B, n + 1); zero for n = 0
    d_q = t[:, -1] + torch.linalg.vecdot(row, h)  # d_n . q
    rho = d_q / (row[:, -1] - d_q)
    ok = active & (rho.abs() < limit)  # False for NaN and Inf too
    rho = torch.where(ok, rho, 0.0)
    scale = 1 + rho
    coef = h * scale[:, None]
    lam_m1 = None
    if lam is not None:
        lam_m1 = torch.where(ok, lam.double() - 1, 0.0)
        coef[:, -1] += rho * lam_m1
    return row, _tri_row(row, bidiag), ok, lam_m1, scale.to(rows.dtype), coef.to(rows.dtype)


@dataclass
class _BroydenState:
    """The inverse-Jacobian estimate, the step lengths of the last step (None: all 1) and whether a step was made."""

    inverse: _InverseJacobian
    lam: Tensor | None = None
    started: bool = False


@dataclass(frozen=True)
class Broyden(Solver):
    """Limited-memory "good" Broyden method on g(z) = f(z) - z; one call of f per iteration (up to 1 + ls_steps
    with the line search, each counted).

    Args:
        memory: number of rank-one updates kept (>= 1), or None (the default) to keep every update of the solve
            (memory = max_iter: H is never reduced). Storage per sample grows with the updates made, up to
            min(memory, max_iter) + 1 state-sized rows (doubling from 16), plus 2 (memory // 2) rows once a full
            memory was reduced to its dominant memory // 2 updates (so with memory 1 every update is dropped at once:
            plain fixed-point steps). A reduction costs iterations on near-critical problems
            (benchmarks/broyden_memory.py), so set ``memory`` only to bound storage below the iterations a solve
            makes; TorchDEQ's Broyden allocates 2 max_iter rows whatever it uses.
        line_search: backtrack on the step length when ||f(z) - z|| does not decrease enough.
        ls_steps: the most halvings per iteration when ``line_search`` is on.
        armijo: sufficient-decrease constant of the Armijo condition, in (0, 0.5).
    """

    memory: int | None = None
    line_search: bool = False
    ls_steps: int = 3
    armijo: float = 1e-4
    name: ClassVar[str] = "broyden"

    def __post_init__(self) -> None:
        if self.memory is not None:
            check_int(self.name, "memory", self.memory, 1)
        if not isinstance(self.line_search, bool):
            raise TypeError(f"{self.name}: line_search must be True or False, got {self.line_search!r}.")
        check_int(self.name, "ls_steps", self.ls_steps, 0)
        if not 0.0 < check_number(self.name, "armijo", self.armijo) < 0.5:
            raise ValueError(f"{self.name}: armijo must be in (0, 0.5), got {self.armijo}.")

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> _BroydenState:
        # A solve makes at most max_iter - 2 updates, so with memory >= max_iter (or None) the buffer never fills:
        # capping it at max_iter gives the same iterates (the buffers grow as updates arrive, up to memory + 1 rows).
        memory = loop.max_iter if self.memory is None else min(self.memory, loop.max_iter)
        inverse = _InverseJacobian(z, memory)
        inverse.set_direction(g)  # H_0 = I: the first step is f(z0)
        return _BroydenState(inverse)

    def step(self, state: _BroydenState, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        inverse = state.inverse
        if state.started:  # the update of the step that led to z
            # compiled with dynamic shapes (compile_step=True): the history grows by a row per update
            inverse.update(g, state.lam, loop.active, loop.compiled(_update_kernel, dynamic=True))
            if inverse.full:
                inverse.reduce(g)
        state.started = True
        d = inverse.direction
        if not self.line_search or self.ls_steps == 0:
            state.lam = None
            return Step(z + d, state, temporary=True)
        z_new, fz_new, state.lam = _line_search(loop, z, g, d, self.ls_steps, self.armijo)
        return Step(z_new, state, fz=fz_new)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.vecdot(a, b)


def _line_search(
    loop: Loop, x: Tensor, gx: Tensor, d: Tensor, ls_steps: int, armijo: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The next iterate x + lam d, f there, and the step lengths lam (B,): halved (at most ``ls_steps`` times) for the
    active samples whose ||g||^2 did not decrease enough (Armijo)."""
    x_new, fx_new = loop.trial(x + d, temporary=True)
    phi0 = _dot(gx, gx)
    step = torch.ones_like(phi0)
    for _ in range(ls_steps):
        g_try = fx_new - x_new
        phi = _dot(g_try, g_try)
        retry = loop.active & ~(phi <= (1 - 2 * armijo * step) * phi0)  # non-finite phi also retries
        if not bool(retry.any()):
            break
        step = torch.where(retry, step / 2, step)
        x_try, fx_try = loop.trial(torch.where(retry[:, None], x + step[:, None] * d, x_new), temporary=True)
        x_new = x_try
        fx_new = torch.where(retry[:, None], fx_try, fx_new)
    return x_new, fx_new, step
