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
So only the directions are stored, one state-sized row per update, instead of the two rows u, v of the additive form
H = I + sum u v^T, whose v = H^T s costs two more passes over the history. Applying the F stored factors to a vector w
is one batched pass to get t = D w (with the Gram row of the newest direction), a small lower-triangular solve
T e = t for the coefficients e_j = d_j.x_j / |d_j|^2 of the factors applied one after another (T = N - L: N =
diag |d_j|^2, L_ji = b1_i d_j.d_{i+1} + b0_i d_j.d_i, i < j, one row added per update), and one batched pass to add
D^T (b e): two passes over the history per iteration.

Built for few operations per iteration (about 17, none a host read, no view made in the loop): the buffers have room
for C factors (grown, below), and every pass, product and solve runs over all of them with fixed shapes: a direction
not made yet is a zero row, a factor not made yet has b = 0 and an identity row in T, so neither contributes. T is kept
transposed and negated (``neg_t_t`` = -T^T), so that the solve takes the right-hand side as a row and its sign flips
into the pass that follows for free. The small matrices are in the state's dtype: C x C per sample (T), beside the
(C + 1) state-sized rows; C is the limit itself up to 32 factors, beyond that it grows with the updates made (16
at first, doubled), so that a short solve under a generous limit keeps little.

Limited memory (only when ``memory`` is set below max_iter; by default every update of the solve is kept: full
Broyden, no reduction): once the stored updates reach ``memory``, the whole low-rank part of H
is replaced by its best approximation of rank memory // 2 (Broyden rank reduction, van de Rotten & Verduyn Lunel
2003), kept in the additive form H_base = I + sum u_i v_i^T under the factors that follow: dropping single old terms
instead makes the iteration diverge, and restarting from H = I loses the curvature learned so far. The reduction
computes the Gram matrices of the rows it combines (float64) and writes the new base rows in two passes. Storage grows
with the updates made, never with a large iteration limit: with F updates stored, at most 2 F + 1 direction rows (16
at first, doubled as needed, at most memory + 1; all memory + 1 at once when memory is at most 32) and 2 (memory // 2)
rows for the base once reduced, each of the state's size, and a C x C matrix per sample. A solve that stops by
tolerance after 10 iterations costs the same at max_iter 12 and 3000 (benchmarks/broyden_limit.py).
With ``line_search`` the step length is halved (at most ``ls_steps`` times) for the samples whose residual norm did
not decrease enough (Armijo condition on ||g||^2); every trial is a counted call of f.

Broyden without a line search and with every update kept (``memory=None``) is capturable
(:attr:`~deq_core.Solver.capturable`): when the loop compiles (``compile_step=True`` or ``capture=True``) its state
is :class:`_Factors`, buffers with room for max_iter factors from the start (fixed shapes: no growth), the number of
factors made kept in a tensor, and its step :func:`_factor_step` a pure function of them, the same arithmetic as
:meth:`_InverseJacobian.update` with the factor's index as a tensor. Its first step makes a factor that does nothing
(from a zero direction), so that every step is the same function and the iterates are the eager ones up to rounding.
A line search reads the device and a rank reduction changes the shapes: with either, the eager loop runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from ._options import check_int, check_number
from .base import Loop, Solver, Step

# Factors the buffers have room for when a solve starts (all of them when the limit is at most twice this); doubled
# from there as updates arrive.
_FIRST_ROWS = 16


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
    """H = P_{F-1} ... P_0 H_base for one batch, in buffers with room for ``capacity`` factors (see the module
    docstring), and the current direction d_F = H g (row F of ``dirs``, also ``direction``).

    Buffers, all (B, ...) per sample, made by :meth:`_allocate` with every view a step uses: ``dirs`` (C + 1, D): the
    directions d_0..d_F, then zeros (row F + 1 holds w = H_base g_new during an update, then d_{F+1}); ``neg_t_t``
    (C, C): -T^T, -identity beyond the factors made; ``products`` (2, C + 1): the Gram row of d_F and t = D w of the
    last update; ``b1``, ``b0`` (C): the factors' coefficients (0 beyond them; b0 only with a line search);
    ``h`` (C + 1): -(b e), the combination of the directions that q adds to w. H_base = I + sum_i u_i v_i^T (rank r,
    0 until the first reduction): rows of ``base_u``, ``base_v`` (B, r, D). ``factors + r`` never exceeds ``memory``.
    """

    def __init__(self, g: Tensor, memory: int, line_search: bool = False) -> None:
        batch, dim = g.shape
        self.memory = memory
        self.line_search = line_search  # b0 (lam - 1) is kept only with a line search: otherwise it is 0
        self.keep = min(memory // 2, dim)  # rank of H_base after a reduction
        self.factors = 0
        self.base_u = g.new_zeros(batch, 0, dim)
        self.base_v = g.new_zeros(batch, 0, dim)
        self.base_v_t = self.base_v.mT
        self._limit = 1 / (4 * torch.finfo(g.dtype).eps)  # |rho| above this: the update is (numerically) singular
        self._one, self._zero = g.new_ones(()), g.new_zeros(())
        # Room for every factor at once when that is at most twice the first room: growing would briefly hold both
        # buffers, more than the whole room (a limit of 30 grew 16 -> 30, and the copy outweighed TorchDEQ's buffers).
        self._allocate(memory if memory <= 2 * _FIRST_ROWS else _FIRST_ROWS, g)
        self.set_direction(g)

    def _allocate(self, capacity: int, like: Tensor) -> None:
        """Zeroed buffers for ``capacity`` factors and their views (the previous ones, if any, are dropped)."""
        batch, dim = like.shape
        rows = capacity + 1
        self.capacity = capacity
        self.dirs = like.new_zeros(batch, rows, dim)
        self.dirs_t = self.dirs.mT
        self.rows = self.dirs.unbind(1)  # (B, D) each
        self.rows_3d = self.dirs.split(1, dim=1)  # (B, 1, D) each
        row, sample = self.dirs.stride(1), self.dirs.stride(0)
        # [d_F; row F + 1] as (B, 2, D), and d_F as (B, D, 1), for every F
        self.pairs = self.dirs.as_strided((capacity, batch, 2, dim), (row, sample, row, 1)).unbind(0)
        self.columns = self.dirs.as_strided((rows, batch, dim, 1), (row, sample, 1, 1)).unbind(0)
        self.neg_t_t = like.new_zeros(batch, capacity, capacity)
        diagonal = self.neg_t_t.as_strided((capacity, batch, 1, 1), (capacity + 1, capacity * capacity, 1, 1))
        self.t_diagonal = diagonal.fill_(-1.0).unbind(0)  # -T_FF at F, (B, 1, 1); -1 for a factor not made yet
        self.t_columns = self.neg_t_t.unbind(2)  # column F of -T^T: minus row F of T, (B, C)
        self.products = like.new_zeros(batch, 2, rows)
        per_sample = self.products.stride(0)
        self.gram_next = self.products.as_strided((batch, capacity), (per_sample, 1), 1)  # d_F . d_{i+1}
        self.gram_same = self.products.as_strided((batch, capacity), (per_sample, 1))  # d_F . d_i
        self.norms = self.products.as_strided((rows, batch, 1, 1), (1, per_sample, 1, 1)).unbind(0)  # |d_F|^2 at F
        self.t_row = self.products.as_strided((batch, 1, capacity), (per_sample, rows, 1), rows)  # t = D w
        self.b1 = like.new_zeros(batch, 1, capacity)
        self.b1_row = self.b1.view(batch, capacity)
        self.b1_each = self.b1.as_strided((capacity, batch, 1, 1), (1, capacity, 1, 1)).unbind(0)
        self.h = like.new_zeros(batch, 1, rows)
        self.h_next = self.h.as_strided((batch, 1, capacity), (rows, rows, 1), 1)  # coefficients on d_1..d_C
        if self.line_search:
            self.b0 = like.new_zeros(batch, 1, capacity)
            self.b0_row = self.b0.view(batch, capacity)
            self.b0_each = self.b0.as_strided((capacity, batch, 1, 1), (1, capacity, 1, 1)).unbind(0)
            self.h_same = self.h.as_strided((batch, 1, capacity), (rows, rows, 1))  # on d_0..d_{C-1}

    def _grow(self) -> None:
        """Twice the room (at most ``memory`` factors in all), the factors and directions moved over."""
        old, n = self, self.factors
        dirs, neg_t_t, b1, b0 = old.dirs, old.neg_t_t, old.b1, getattr(old, "b0", None)
        self._allocate(min(2 * self.capacity, self.memory - self.base_u.shape[1]), self.rows[0])
        self.dirs[:, : n + 1] = dirs[:, : n + 1]
        self.neg_t_t[:, :n, :n] = neg_t_t[:, :n, :n]
        self.b1[:, :, :n] = b1[:, :, :n]
        if b0 is not None:
            self.b0[:, :, :n] = b0[:, :, :n]

    @property
    def direction(self) -> Tensor:
        """The newest direction d_F, (B, D) (a view into the buffer)."""
        return self.rows[self.factors]

    @property
    def full(self) -> bool:
        return self.factors + self.base_u.shape[1] >= self.memory

    def set_direction(self, g: Tensor) -> None:
        """Start over from H_base: d_0 = H_base g, no factors (``dirs`` rows beyond row 0 are zero)."""
        self.factors = 0
        self._apply_base(g, 0)

    def _apply_base(self, g: Tensor, row: int) -> None:
        """Row ``row`` of ``dirs`` = H_base g = g + sum_i u_i (v_i . g) for g (B, D)."""
        if self.base_u.shape[1]:
            g_rows = g.view(g.shape[0], 1, g.shape[1])
            torch.baddbmm(g_rows, torch.bmm(g_rows, self.base_v_t), self.base_u, out=self.rows_3d[row])
        else:
            self.rows[row].copy_(g)

    def update(self, g_new: Tensor, lam: Tensor | None) -> None:
        """From q = H g_new (the current H), append the Broyden update of the step lam d_F and write the next direction
        d_{F+1} = H_new g_new. ``lam``: (B,) step lengths (None: all 1)."""
        n = self.factors
        if n == self.capacity:
            self._grow()
        work = self.rows_3d[n + 1]  # the row of the next direction: w = H_base g_new first
        self._apply_base(g_new, n + 1)
        torch.bmm(self.pairs[n], self.dirs_t, out=self.products)  # d_n . d_i and w . d_i: the first pass
        # row n of T (the recursion of factor n, made below), negated into column n of -T^T; its diagonal |d_n|^2
        torch.mul(self.gram_next, self.b1_row, out=self.t_columns[n])
        if lam is not None:
            self.t_columns[n].addcmul_(self.gram_same, self.b0_row)
        torch.neg(self.norms[n], out=self.t_diagonal[n])
        # e with T e = t (factors 0..n-1; the rest have b = 0), as -e: e' (-T^T) = t^T
        neg_e = torch.linalg.solve_triangular(self.neg_t_t, self.t_row, upper=True, left=False)
        if lam is None:
            torch.mul(neg_e, self.b1, out=self.h_next)
        else:
            self.h.zero_()
            self.h_next.addcmul_(neg_e, self.b1)
            self.h_same.addcmul_(neg_e, self.b0)
        q = torch.baddbmm(work, self.h, self.dirs, alpha=-1)  # w + D^T (b e): the second pass, (B, 1, D)
        d_q = torch.bmm(q, self.columns[n])  # d_n . q, (B, 1, 1)
        rho = d_q / (self.norms[n] - d_q)
        ok = rho.abs() < self._limit  # False for NaN and Inf too
        torch.where(ok, self._one, self._zero, out=self.b1_each[n])
        scale = torch.where(ok, rho + 1, self._one)
        if lam is None:
            torch.mul(q, scale, out=work)
        else:
            lam_m1 = torch.where(ok, lam.view(-1, 1, 1) - 1, self._zero)
            self.b0_each[n].copy_(lam_m1)
            torch.addcmul(q * scale, self.rows_3d[n], rho * lam_m1, out=work)
        self.factors = n + 1

    def reduce(self, g: Tensor) -> None:
        """Replace H - I by its best rank-``keep`` approximation as the new H_base, then start over: d_0 = H_base g.

        With F factors on a base of rank r, H - I = (P - I) H_base + (H_base - I) and P - I = D^T K D_{<F}
        (K = Bidiag T^{-1}, (F + 1) x F), so H - I = sum over M = r + F rows of left^T right with
            left = [u_i; (K^T D)_j],    right = [v_i; d_j + sum_i (d_j . u_i) v_i]    (j < F).
        Their Gram matrices follow from those of the directions, u and v and the dots of the directions with u and v
        (float64), so the rows are never formed: the new base rows are combinations of u, v and the directions.
        """
        n, r = self.factors, self.base_u.shape[1]
        batch = g.shape[0]
        dtype = self.dirs.dtype
        if self.keep > 0:
            small = dict(dtype=torch.float64, device=g.device)
            rows = self.dirs[:, : n + 1]
            gram = torch.bmm(rows, rows.mT).double()
            bidiag = torch.zeros(batch, n + 1, n, **small)
            if self.line_search:
                bidiag.diagonal(dim1=1, dim2=2).copy_(self.b0[:, 0, :n])
            bidiag.diagonal(offset=-1, dim1=1, dim2=2).copy_(self.b1[:, 0, :n])
            tri = -self.neg_t_t[:, :n, :n].mT.double()
            eye = torch.eye(n, **small).expand(batch, n, n)
            k_mat = bidiag @ torch.linalg.solve_triangular(tri, eye, upper=False)  # (B, n + 1, n)
            gram_left = k_mat.mT @ gram @ k_mat  # (K^T D)(K^T D)^T
            gram_right = gram[:, :n, :n]
            if r:
                d_u = torch.bmm(rows, self.base_u.mT).double()  # (B, n + 1, r)
                d_v = torch.bmm(rows[:, :n], self.base_v.mT).double()  # (B, n, r)
                c = d_u[:, :n]  # right rows d_j + sum_i c_ji v_i
                gram_u = torch.bmm(self.base_u, self.base_u.mT).double()
                gram_v = torch.bmm(self.base_v, self.base_v.mT).double()
                k_du = k_mat.mT @ d_u  # (K^T D) . u
                gram_left = torch.cat([torch.cat([gram_u, k_du.mT], 2), torch.cat([k_du, gram_left], 2)], 1)
                v_c = gram_v @ c.mT  # (B, r, n): v . (c V)
                v_right = d_v.mT + v_c  # v_i . right_j
                right_right = gram_right + c @ d_v.mT + d_v @ c.mT + c @ v_c
                gram_right = torch.cat([torch.cat([gram_v, v_right], 2), torch.cat([v_right.mT, right_right], 2)], 1)
            # a sample whose rows overflowed keeps no low-rank part (its H restarts from I); LAPACK must not see it
            finite = (gram_left.sum((1, 2)) + gram_right.sum((1, 2))).isfinite()[:, None, None]
            gram_left = torch.where(finite, gram_left, 0.0)
            gram_right = torch.where(finite, gram_right, 0.0)
            coef_u, coef_v = _best_low_rank(gram_left, gram_right, self.keep, dtype)  # (B, keep, r + n)
            # new u = coef_u[:, :, :r] u + (coef_u[:, :, r:] K^T) D; new v = (coef_v[:, :, :r] + coef_v[:, :, r:] c) v
            # + coef_v[:, :, r:] D_{<F}
            new_u = torch.bmm((coef_u[:, :, r:] @ k_mat.mT).to(dtype), rows)
            new_v = torch.bmm(coef_v[:, :, r:].to(dtype), rows[:, :n])
            if r:
                new_u.baddbmm_(coef_u[:, :, :r].to(dtype), self.base_u)
                new_v.baddbmm_((coef_v[:, :, :r] + coef_v[:, :, r:] @ c).to(dtype), self.base_v)
            self.base_u = new_u.masked_fill_(~finite, 0.0)
            self.base_v = new_v.masked_fill_(~finite, 0.0)
            self.base_v_t = self.base_v.mT
        # start over on the new base, in fresh buffers for the factors that remain room for; the old directions are
        # released first, so that the two sets never coexist at the peak
        if self.keep > 0:
            del rows
        self.dirs = self.dirs_t = self.rows = self.rows_3d = self.pairs = self.columns = None
        self._allocate(min(self.capacity, self.memory - self.base_u.shape[1]) or 1, g)
        self.set_direction(g)


class _Factors(NamedTuple):
    """Broyden's state in its capturable form: tensors of fixed shapes, nothing that changes on the host.

    ``dirs`` (B, C + 1, D): the directions, zeros beyond the newest (row 0 stays zero: the factor of the first step,
    which does nothing); ``neg_t_t`` (B, C, C): -T^T, -identity beyond the factors made; ``b1`` (B, 1, C): the
    factors' coefficients (1 for an update made, 0 for one skipped and beyond); ``count`` (1,) int64: the factors made.
    C is max_iter: the loop's graphs call the step at most max_iter times.
    """

    dirs: Tensor
    neg_t_t: Tensor
    b1: Tensor
    count: Tensor


def _factors(g: Tensor, capacity: int) -> _Factors:
    """The capturable state before the first step, for ``capacity`` factors and g (B, D)."""
    batch, dim = g.shape
    eye = torch.eye(capacity, dtype=g.dtype, device=g.device)
    return _Factors(g.new_zeros(batch, capacity + 1, dim), (-eye).expand(batch, -1, -1).clone(),
                    g.new_zeros(batch, 1, capacity), torch.zeros(1, dtype=torch.int64, device=g.device))  # fmt: skip


def _factor_step(state: _Factors, z: Tensor, g: Tensor) -> tuple[Tensor, _Factors]:
    """One Broyden step in the capturable form, a pure function: the update of the step that led to z (g = f(z) - z,
    (B, D)) as factor n = ``state.count``, then z + d_{n+1} (B, D) and the next state (new tensors). The arithmetic
    of :meth:`_InverseJacobian.update` without a base or a line search: one pass gives d_n . d_i and g . d_i, the
    triangular solve the coefficients, a second pass q = H g, and d_{n+1} = (1 + rho) q. At n = 0, d_0 = 0: the factor
    is skipped (b1 = 0, its diagonal of T is kept at 1) and d_1 = g, the eager loop's first direction."""
    dirs, neg_t_t, b1, n = state
    capacity = neg_t_t.shape[1]
    d_n = dirs.index_select(1, n)  # (B, 1, D)
    products = torch.bmm(torch.cat((d_n, g.unsqueeze(1)), 1), dirs.mT)  # (B, 2, C + 1): d_n . d_i, g . d_i
    norm = products[:, 0].index_select(1, n)  # |d_n|^2, (B, 1)
    # column n of -T^T: the recursion of factor n below its diagonal -|d_n|^2 (-1 for the zero direction)
    at_n = torch.arange(capacity, device=g.device) == n
    column = torch.where(at_n, -norm.where(norm > 0, 1.0), products[:, 0, 1:] * b1[:, 0])
    neg_t_t = neg_t_t.index_copy(2, n, column.unsqueeze(2))
    neg_e = torch.linalg.solve_triangular(neg_t_t, products[:, 1:, :capacity], upper=True, left=False)
    q = g.unsqueeze(1) - torch.bmm(torch.nn.functional.pad(neg_e * b1, (1, 0)), dirs)  # H g, (B, 1, D)
    d_q = torch.bmm(q, d_n.mT)
    rho = d_q / (norm.unsqueeze(2) - d_q)
    ok = rho.abs() < 1 / (4 * torch.finfo(g.dtype).eps)  # False for NaN and Inf too (and for the zero direction)
    direction = q * torch.where(ok, rho + 1, 1.0)
    state = _Factors(dirs.index_copy(1, n + 1, direction), neg_t_t, b1.index_copy(2, n, ok.to(b1.dtype)), n + 1)
    return z + direction.squeeze(1), state


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
            (memory = max_iter: H is never reduced). Storage per sample: one state-sized row per update stored and
            a C x C matrix in the state's dtype, C = min(memory, max_iter) when that is at most 32, else growing with
            the updates made (16 at first, doubled as needed) up to it; a full memory is reduced to its dominant
            memory // 2 updates (2 rows each; with memory 1 every update is dropped at once: plain fixed-point steps).
            A reduction costs iterations on near-critical problems (benchmarks/broyden_memory.py), so set ``memory``
            only to bound storage below the iterations a solve makes; TorchDEQ's Broyden allocates 2 max_iter rows
            whatever it uses.
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

    @property
    def capturable(self) -> bool:  # type: ignore[override]
        """True without a line search (whose trials read the device) and with every update kept (``memory=None``:
        a rank reduction changes the shapes); see the module docstring."""
        return self.memory is None and not (self.line_search and self.ls_steps > 0)

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> _BroydenState | _Factors:
        if loop.compiling and self.capturable:
            return _factors(g, loop.max_iter)
        # A solve makes at most max_iter - 2 updates, so with memory >= max_iter (or None) the buffer never fills:
        # capping it at max_iter gives the same iterates (the buffers grow as updates arrive, up to memory pairs).
        memory = loop.max_iter if self.memory is None else min(self.memory, loop.max_iter)
        return _BroydenState(_InverseJacobian(g, memory, self.line_search and self.ls_steps > 0))

    def step(self, state: _BroydenState | _Factors, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        if isinstance(state, _Factors):
            return Step(*_factor_step(state, z, g))
        inverse = state.inverse
        if state.started:  # the update of the step that led to z
            inverse.update(g, state.lam)
            if inverse.full:
                inverse.reduce(g)
        state.started = True
        if not self.line_search or self.ls_steps == 0:
            state.lam = None
            return Step(torch.add(z, inverse.direction), state)
        z_new, fz_new, state.lam = _line_search(loop, z, g, inverse.direction, self.ls_steps, self.armijo)
        return Step(z_new, state, fz=fz_new)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.vecdot(a, b)


def _line_search(
    loop: Loop, x: Tensor, gx: Tensor, d: Tensor, ls_steps: int, armijo: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The next iterate x + lam d, f there, and the step lengths lam (B,): halved (at most ``ls_steps`` times) for the
    active samples whose ||g||^2 did not decrease enough (Armijo)."""
    x_new, fx_new = loop.trial(x + d)
    phi0 = _dot(gx, gx)
    step = torch.ones_like(phi0)
    for _ in range(ls_steps):
        g_try = fx_new - x_new
        phi = _dot(g_try, g_try)
        retry = loop.active & ~(phi <= (1 - 2 * armijo * step) * phi0)  # non-finite phi also retries
        if not bool(retry.any()):
            break
        step = torch.where(retry, step / 2, step)
        x_try, fx_try = loop.trial(torch.where(retry[:, None], x + step[:, None] * d, x_new))
        x_new = x_try
        fx_new = torch.where(retry[:, None], fx_try, fx_new)
    return x_new, fx_new, step
