"""Anderson acceleration (type II, difference form of Walker & Ni 2011), batched with per-sample mixing.

With g(z) = f(z) - z and the last n <= m - 1 differences dZ_i = z_{i+1} - z_i, dG_i = g_{i+1} - g_i:

    gamma   = argmin_gamma ||g_k - dG gamma||^2           (regularized, scale-free normal equations)
    z_{k+1} = z_k + beta g_k - (dZ + beta dG) gamma

The least-squares problem is solved through its normal equations with a ridge term ``reg`` relative to each
column's scale (reg diag(dG^T dG), the ridge reg I of the system with columns scaled to unit norm; not an absolute
constant), so the regularization neither dominates at small residuals nor depends on the units of z. The small
n x n systems are solved in float64. A sample whose system gives non-finite weights (singular, or NaN in its history)
takes a plain damped step instead (gamma = 0).

One step is a fixed sequence of kernels of fixed shapes (``_mix``; 18 operations, no view made in the loop): the
history always holds m - 1 columns (a column not filled yet is zero and gets a zero weight), written in turn; one
batched product of the new difference and g with the history gives the new row and column of the Gram matrix (kept,
float64) and the right-hand side.

Anderson is capturable (:attr:`~deq_core.Solver.capturable`): when the loop compiles (``compile_step=True`` or
``capture=True``), its state is :class:`_Ring`, tensors only (the slot of the next difference included), and its step
:func:`_ring_step` a pure function of them, which the loop traces into one graph with its own bookkeeping (and f,
with ``capture=True``). The first step stores a zero difference without moving to the next slot, so the two forms
make the same iterates up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from ._options import check_int, check_number
from .base import Loop, Solver, Step

_TINY = torch.finfo(torch.float64).tiny


def _mixing_weights(gram: Tensor, rhs: Tensor, reg: float) -> Tensor:
    """gamma (B, n) solving the normal equations (gram + reg diag(gram)) gamma = rhs; gram (B, n, n), rhs (B, n),
    float64: what one step of :func:`_mix` solves, for a Gram matrix given whole.

    The ridge reg diag(G) is the ridge reg I of the system whose columns are scaled to unit norm (Jacobi scaling:
    S (A + reg diag(A)) S = S A S + reg I with S = diag(A)^(-1/2)), so ``reg`` is relative to the scale of each
    difference, without forming the scaled system. A zero column (a difference not made yet, or of a frozen sample)
    gets the smallest normal number as its diagonal, and a zero weight.
    """
    ridge = torch.eye(gram.shape[1], dtype=gram.dtype, device=gram.device) * reg
    system = torch.addcmul(gram, ridge, gram)
    system.diagonal(dim1=1, dim2=2).clamp_min_(_TINY)
    return _solved(system, rhs.unsqueeze(1), gram.new_zeros(())).squeeze(1)


def _solved(system: Tensor, rhs: Tensor, zero: Tensor) -> Tensor:
    """gamma (B, 1, n) with gamma system = rhs (B, 1, n) (row vectors: one solve from the right of the symmetric
    system, no transpose), or ``zero`` (0-d) for a sample whose gamma is not finite (a singular system, NaN or Inf in
    the history): it takes a plain damped step."""
    gamma, _ = torch.linalg.solve_ex(system, rhs, left=False)
    total = gamma.sum(dim=2, keepdim=True)  # NaN or Inf if any weight is
    return torch.where(total.abs() < float("inf"), gamma, zero)


@dataclass
class _History:
    """Anderson's buffers, all made once per solve, with every view a step uses.

    ``rows`` (2 width, B, D): the differences dG_0 .. dG_{width-1}, then those of z + beta g (of f(z) when beta = 1),
    the columns the step subtracts; ``dg_rows`` / ``step_rows``: their rows (B, D); ``dg_t`` (B, D, width) and
    ``steps`` (B, width, D): the same as batched matrices. ``gram`` (B, width, width, float64): dG_i . dG_j, with its
    rows and columns as views; ``products`` (B, 2, width, float64): the new difference's row of the Gram matrix
    (``new_row``) and the right-hand side g . dG_j (``rhs``, (B, 1, width)) of the step; ``ridge`` (width, width):
    reg on the diagonal; ``system`` (B, width, width): the ridge system solved, with its ``diagonal``; ``mixed``
    (B, D) the step's output (``mixed_rows``: the same as (B, 1, D)). ``g``, ``base``: g and z + beta g of the last
    iterate (None before the first step); ``k``: differences stored so far.
    """

    width: int
    dg_rows: tuple[Tensor, ...]
    step_rows: tuple[Tensor, ...]
    dg_t: Tensor
    steps: Tensor
    gram: Tensor
    gram_rows: tuple[Tensor, ...]
    gram_cols: tuple[Tensor, ...]
    products: Tensor
    new_row: Tensor
    rhs: Tensor
    ridge: Tensor
    system: Tensor
    diagonal: Tensor
    mixed: Tensor
    mixed_rows: Tensor
    zero: Tensor
    rows: Tensor
    g: Tensor | None = None
    base: Tensor | None = None
    k: int = 0


class _Ring(NamedTuple):
    """Anderson's state in its capturable form: tensors of fixed shapes, nothing that changes on the host.

    ``rows`` (2 width, B, D): the differences dG_0 .. dG_{width-1}, then those of z + beta g (as in :class:`_History`);
    ``gram`` (B, width, width, float64): dG_i . dG_j; ``previous`` (2, B, D): g and z + beta g of the last iterate;
    ``counters`` (2,) int64: the slot the next difference goes to, and 0 before the first step (whose difference,
    from the last iterate to itself, is zero and keeps the slot), 1 after.
    """

    rows: Tensor
    gram: Tensor
    previous: Tensor
    counters: Tensor


@dataclass(frozen=True)
class Anderson(Solver):
    """Anderson acceleration (type II), batched with per-sample mixing weights; one call of f per iteration.

    Args:
        m: history size, the number of past (z, f(z)) pairs mixed (m - 1 differences); m = 1 is damped iteration.
        beta: mixing parameter in (0, 1]: 1 mixes the f(z) values, smaller values damp toward the z values.
        reg: ridge term relative to the unit-normalized normal equations (>= 0).
    """

    m: int = 8
    beta: float = 1.0
    reg: float = 1e-8
    name: ClassVar[str] = "anderson"
    capturable: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int(self.name, "m", self.m, 1)
        if not 0.0 < check_number(self.name, "beta", self.beta) <= 1.0:
            raise ValueError(f"{self.name}: beta must be in (0, 1], got {self.beta}.")
        if not check_number(self.name, "reg", self.reg) >= 0.0:
            raise ValueError(f"{self.name}: reg must be >= 0, got {self.reg}.")

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> _History | _Ring | None:
        width = min(self.m, loop.max_iter) - 1  # a solve stores at most max_iter - 1 differences
        if width == 0:  # m = 1 (or a one-iteration solve): damped steps, no history
            return None
        batch, dim = z.shape
        small = dict(dtype=torch.float64, device=z.device)
        rows = z.new_zeros(2 * width, batch, dim)
        gram = torch.zeros(batch, width, width, **small)
        if loop.compiling:
            previous = torch.stack((g, self._base(z, fz, g)))
            return _Ring(rows, gram, previous, torch.zeros(2, dtype=torch.int64, device=z.device))
        each = rows.unbind(0)
        products = torch.empty(batch, 2, width, **small)
        system = torch.empty(batch, width, width, **small)
        mixed = z.new_empty(batch, dim)
        return _History(
            width=width, dg_rows=each[:width], step_rows=each[width:], dg_t=rows[:width].permute(1, 2, 0),
            steps=rows[width:].transpose(0, 1), gram=gram, gram_rows=gram.unbind(1), gram_cols=gram.unbind(2),
            products=products, new_row=products[:, 0], rhs=products[:, 1:], ridge=torch.eye(width, **small) * self.reg,
            system=system, diagonal=system.diagonal(dim1=1, dim2=2), mixed=mixed, mixed_rows=mixed.view(batch, 1, dim),
            zero=gram.new_zeros(()), rows=rows,
        )  # fmt: skip

    def _base(self, z: Tensor, fz: Tensor, g: Tensor) -> Tensor:
        """z + beta g, the step before mixing (f(z) itself when beta = 1)."""
        return fz if self.beta == 1.0 else torch.add(z, g, alpha=self.beta)

    def step(self, state: _History | _Ring | None, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        base = self._base(z, fz, g)
        if state is None:
            return Step(base, state)
        if isinstance(state, _Ring):
            return Step(*_ring_step(state, g, base, self.reg))
        g_old, base_old = state.g, state.base
        state.g, state.base = g, base  # rows of the loop's buffer: valid for the next step, which is all we need
        if g_old is None or base_old is None:  # no difference yet: a damped step
            return Step(base, state)
        slot = state.k % state.width
        state.k += 1
        mix = _mix
        mix(state.dg_rows[slot], state.step_rows[slot], state.gram_rows[slot], state.gram_cols[slot], g_old, base_old,
            g, base, state.dg_t, state.steps, state.gram, state.products, state.new_row, state.rhs, state.ridge,
            state.system, state.diagonal, state.mixed, state.mixed_rows, state.zero)  # fmt: skip
        return Step(state.mixed, state)


def _mix(
    dg_slot: Tensor, step_slot: Tensor, gram_row: Tensor, gram_col: Tensor, g_old: Tensor, base_old: Tensor, g: Tensor,
    base: Tensor, dg_t: Tensor, steps: Tensor, gram: Tensor, products: Tensor, new_row: Tensor, rhs: Tensor,
    ridge: Tensor, system: Tensor, diagonal: Tensor, mixed: Tensor, mixed_rows: Tensor, zero: Tensor,
) -> None:  # fmt: skip
    """One Anderson step on the buffers of :class:`_History` (written in place): store the differences from
    (g_old, base_old) to (g, base), (B, D) each, in the slot's rows ``dg_slot`` and ``step_slot``; one batched product
    of [dG_new, g] with the history gives the slot's row and column of the Gram matrix and the right-hand side; solve
    the ridge system for the weights and write base - steps^T gamma into ``mixed`` (B, D)."""
    torch.sub(g, g_old, out=dg_slot)
    torch.sub(base, base_old, out=step_slot)
    pair = torch.stack((dg_slot, g), dim=1)  # (B, 2, D)
    if products.dtype == pair.dtype:
        torch.bmm(pair, dg_t, out=products)
    else:
        products.copy_(torch.bmm(pair, dg_t))
    gram_row.copy_(new_row)
    gram_col.copy_(new_row)
    torch.addcmul(gram, ridge, gram, out=system)  # G + reg diag(G)
    diagonal.clamp_min_(_TINY)  # a zero column (not filled yet): a tiny diagonal, a zero weight
    gamma = _solved(system, rhs, zero)
    torch.bmm(gamma.to(steps.dtype), steps, out=mixed_rows)
    torch.sub(base, mixed, out=mixed)


def _ring_step(state: _Ring, g: Tensor, base: Tensor, reg: float) -> tuple[Tensor, _Ring]:
    """One Anderson step in the capturable form, a pure function: from the state and the current g and z + beta g
    (B, D), the mixed iterate base - steps^T gamma (B, D) and the next state (new tensors; the loop writes them over
    the old ones where it keeps buffers). The same arithmetic as :func:`_mix`: the new differences go to the slot
    ``counters[0]``, one batched product gives the slot's row and column of the Gram matrix and the right-hand side,
    :func:`_mixing_weights` the weights."""
    width = state.gram.shape[1]
    g_old, base_old = state.previous.unbind(0)
    slot, started = state.counters[:1], state.counters[1:]
    dg = g - g_old
    rows = state.rows.index_copy(0, torch.cat((slot, slot + width)), torch.stack((dg, base - base_old)))
    products = torch.bmm(torch.stack((dg, g), dim=1), rows[:width].permute(1, 2, 0)).to(state.gram.dtype)
    new_row = products[:, :1]
    gram = state.gram.index_copy(1, slot, new_row).index_copy(2, slot, new_row.mT)
    gamma = _mixing_weights(gram, products[:, 1], reg)
    mixed = base - torch.bmm(gamma.unsqueeze(1).to(rows.dtype), rows[width:].transpose(0, 1)).squeeze(1)
    counters = torch.cat(((slot + started) % width, torch.ones_like(started)))
    return mixed, _Ring(rows, gram, torch.stack((g, base)), counters)
