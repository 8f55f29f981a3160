"""Limited-memory "good" Broyden method for the root of g(z) = f(z) - z, batched per sample.

Here H approximates the inverse of I - J_f, so that the Newton step is z <- z + H g; H_0 = I gives the plain
fixed-point step. Each iteration steps along d = H g (z <- z + lam d, lam = 1 unless the line search shortens the
step), evaluates g there and applies the good-Broyden update (s = lam d, y = g_old - g_new):

    H <- H + (s - H y) s^T H / (s^T H y).

H is kept in additive form, H = I + sum_j u_j v_j^T, one pair of rows (u_j, v_j) per update. Since H g_old = d, the
update needs only q = H g_new and v = H^T d: with rho = d.q / (|d|^2 - d.q),

    u = (q + (lam - 1) d) / (|d|^2 - d.q),    v = H^T d,    d_new = H_new g_new = q + u (d.q) = (1 + rho) q + ...

so one iteration is four batched passes over the stored rows (two for q, two for v) and a few (B, 1, 1) operations,
about 21 operations without a line search, none of them a host read: the small matrices of other forms (a product
form's Gram and triangular coefficients) are not needed. An update with |rho| above 1 / (4 eps) (numerically
singular; NaN too) is skipped (u = 0: H unchanged, d_new = q).

Limited memory (only when ``memory`` is set below max_iter; by default every update of the solve is kept: full
Broyden, no reduction): once ``memory`` pairs are stored, the low-rank part sum_j u_j v_j^T is replaced by its best
approximation of rank memory // 2 (Broyden rank reduction, van de Rotten & Verduyn Lunel 2003), computed from the
Gram matrices of the rows: dropping single old pairs instead makes the iteration diverge, and restarting from H = I
loses the curvature learned so far. Storage grows with the updates made, never with the iteration limit: 2 F
state-sized rows for F updates stored, allocated 12 pairs at first, then grown by half as needed, at most 2 memory rows
(TorchDEQ's Broyden allocates 2 max_iter rows at the start). A solve that stops by tolerance after 10 iterations costs
the same at max_iter 12 and 3000 (benchmarks/broyden_limit.py).
With ``line_search`` the step length is halved (at most ``ls_steps`` times) for the samples whose residual norm did
not decrease enough (Armijo condition on ||g||^2); every trial is a counted call of f.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ._options import check_int, check_number
from .base import Loop, Solver, Step

# Update pairs allocated when a solve starts; the buffers grow by half from there as updates arrive (12, 18, 27, 40,
# ...: at most a third of the room allocated is unused, and a solve of a dozen iterations needs no growth).
_FIRST_ROWS = 12


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
    """H = I + sum_j u_j v_j^T over the ``n`` stored pairs of one batch, and the current direction d = H g.

    Buffers: ``pairs`` (2, B, rows, D) (rows = room for pairs: grown by half at a time up to ``memory``), with the views
    ``u`` and ``v`` (B, rows, D) and their transposes made when allocated; ``d_rows`` (B, 1, D) the direction (``d``:
    the same as (B, D), ``d_t``: as (B, D, 1)). Rows >= n are never read.
    """

    def __init__(self, g: Tensor, memory: int) -> None:
        batch, dim = g.shape
        self.memory = memory
        self.keep = min(memory // 2, dim)  # rank of H after a reduction
        self.n = 0
        self._allocate(min(memory, _FIRST_ROWS), g)
        self.d_rows = g.new_empty(batch, 1, dim)
        self.d = self.d_rows.view(batch, dim)
        self.d_t = self.d_rows.view(batch, dim, 1)
        self.d.copy_(g)  # H_0 = I: the first step is f(z0)
        self._limit = 1 / (4 * torch.finfo(g.dtype).eps)  # |rho| above this: the update is (numerically) singular
        self._zero = g.new_zeros(())

    def _allocate(self, rows: int, like: Tensor) -> None:
        """Buffers for ``rows`` pairs (unwritten), with their views, for iterates like ``like`` (B, D)."""
        self.pairs = like.new_empty(2, like.shape[0], rows, like.shape[1])  # every row is written before it is read
        self.u, self.v = self.pairs.unbind(0)
        self.u_t, self.v_t = self.pairs.mT.unbind(0)

    def _grow(self) -> None:
        """Half as much room again (at most ``memory`` pairs), the stored pairs moved over."""
        old, n = self.pairs, self.n
        self._allocate(min(n + (n + 1) // 2, self.memory), self.d)
        self.pairs[:, :, :n] = old[:, :, :n]

    def apply(self, g_rows: Tensor, out: Tensor | None = None) -> Tensor:
        """H g for g_rows (B, 1, D): two passes over the stored rows; into ``out`` (B, 1, D) when given."""
        n = self.n
        return torch.baddbmm(g_rows, torch.bmm(g_rows, self.v_t[:, :, :n]), self.u[:, :n], out=out)

    def update(self, g: Tensor, lam: Tensor | None) -> None:
        """From q = H g_new (the current H), append the update of the step lam d and write the next direction
        d_new = H_new g_new into ``d``. ``g``: (B, D) g at the new iterate; ``lam``: (B,) step lengths (None: all
        1)."""
        n = self.n
        if n == self.u.shape[1]:
            self._grow()
        batch, dim = g.shape
        q = self.apply(g.view(batch, 1, dim))
        u_new, v_new = self.u[:, n : n + 1], self.v[:, n : n + 1]
        torch.baddbmm(self.d_rows, torch.bmm(self.d_rows, self.u_t[:, :, :n]), self.v[:, :n], out=v_new)  # H^T d
        d_q = torch.bmm(q, self.d_t)  # (B, 1, 1)
        denominator = torch.bmm(self.d_rows, self.d_t) - d_q  # |d|^2 - d.q
        ok = (d_q / denominator).abs() < self._limit  # rho finite and not huge; False for NaN
        scale = torch.where(ok, denominator.reciprocal(), self._zero)  # 0: the update is skipped
        if lam is None:
            torch.mul(q, scale, out=u_new)
        else:
            torch.mul(torch.addcmul(q, self.d_rows, (lam - 1).view(batch, 1, 1)), scale, out=u_new)
        torch.addcmul(q, u_new, d_q, out=self.d_rows)  # d_new = q + u (v . g_new), v . g_new = d . q
        self.n = n + 1

    @property
    def full(self) -> bool:
        return self.n >= self.memory

    def reduce(self, g: Tensor) -> None:
        """Replace H - I by its best rank-``keep`` approximation, then d = H g (memory 1, or D = 1: H = I)."""
        n, keep = self.n, self.keep
        batch, dim = g.shape
        if keep > 0:
            dtype = self.u.dtype
            u, v = self.u[:, :n], self.v[:, :n]
            gram_u = torch.bmm(u, u.mT).double()
            gram_v = torch.bmm(v, v.mT).double()
            # a sample whose rows overflowed keeps no low-rank part (its H restarts from I); LAPACK must not see it
            finite = (gram_u.sum((1, 2)) + gram_v.sum((1, 2))).isfinite()[:, None, None]
            gram_u = torch.where(finite, gram_u, 0.0)
            gram_v = torch.where(finite, gram_v, 0.0)
            coef_u, coef_v = _best_low_rank(gram_u, gram_v, keep, dtype)  # (B, keep, n)
            new_u = torch.bmm(coef_u.to(dtype), u).masked_fill_(~finite, 0.0)
            new_v = torch.bmm(coef_v.to(dtype), v).masked_fill_(~finite, 0.0)
            self.u[:, :keep] = new_u
            self.v[:, :keep] = new_v
        self.n = keep
        self.apply(g.view(batch, 1, dim), out=self.d_rows)


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
            (memory = max_iter: H is never reduced). Storage per sample: two state-sized rows per update stored,
            growing with the updates made (12 pairs at first, grown by half as needed) up to min(memory, max_iter)
            pairs; a full memory is reduced to its dominant memory // 2 updates (so with memory 1 every update is
            dropped at once: plain fixed-point steps). A reduction costs iterations on near-critical problems
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
        # capping it at max_iter gives the same iterates (the buffers grow as updates arrive, up to memory pairs).
        memory = loop.max_iter if self.memory is None else min(self.memory, loop.max_iter)
        return _BroydenState(_InverseJacobian(g, memory))

    def step(self, state: _BroydenState, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        inverse = state.inverse
        if state.started:  # the update of the step that led to z
            inverse.update(g, state.lam)
            if inverse.full:
                inverse.reduce(g)
        state.started = True
        if not self.line_search or self.ls_steps == 0:
            state.lam = None
            return Step(torch.add(z, inverse.d), state)
        z_new, fz_new, state.lam = _line_search(loop, z, g, inverse.d, self.ls_steps, self.armijo)
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
