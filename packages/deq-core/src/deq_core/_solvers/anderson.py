"""Anderson acceleration (type II, difference form of Walker & Ni 2011), batched with per-sample mixing.

With g(z) = f(z) - z and the last n <= m - 1 differences dZ_i = z_{i+1} - z_i, dG_i = g_{i+1} - g_i:

    gamma   = argmin_gamma ||g_k - dG gamma||^2           (regularized, scale-free normal equations)
    z_{k+1} = z_k + beta g_k - (dZ + beta dG) gamma

The least-squares problem is solved through its normal equations with a ridge term ``reg`` relative to each
column's scale (reg diag(dG^T dG), the ridge reg I of the system with columns scaled to unit norm; not an absolute
constant), so the regularization neither dominates at small residuals nor depends on the units of z. The small
n x n systems are solved in float64. A sample whose system is singular or gives non-finite weights takes a plain
damped step instead (gamma = 0).

With ``compile_step=True`` the same update runs as one kernel of fixed shapes (:func:`_record_and_mix`, compiled
through :meth:`~deq_core.Loop.compiled`): all m - 1 columns every iteration (a column not yet filled is zero and gets
a zero weight) and the slot of the new difference as a tensor, so that torch compiles it once. The eager step keeps
the sliced form, which costs fewer operations without a compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ._options import check_int, check_number
from .base import Loop, Solver, Step

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


@dataclass
class _History:
    """Anderson's state. Rows 0..slots-1 of ``dg``: the differences dG_i; row ``width``: the current g, so that one
    batched product over the rows gives both the new row of the Gram matrix (dG_new . dG_j) and the next right-hand
    side (g . dG_j). ``steps``: dZ_i + beta dG_i, differences of z + beta g (of f(z) when beta = 1), the columns the
    step subtracts. ``gram``: dG_i . dG_j (float64), ``rhs``: dG_j . g. ``g``, ``base``: g and z + beta g of the
    last iterate (None before the first step); ``k``: differences stored so far. ``index``: for the compiled kernel,
    the int64 tensors [0], [1], ... naming the slots (empty when the solve does not compile)."""

    slots: int
    dg: Tensor
    steps: Tensor
    gram: Tensor
    rhs: Tensor
    g: Tensor | None = None
    base: Tensor | None = None
    k: int = 0
    index: tuple[Tensor, ...] = ()


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

    def __post_init__(self) -> None:
        check_int(self.name, "m", self.m, 1)
        if not 0.0 < check_number(self.name, "beta", self.beta) <= 1.0:
            raise ValueError(f"{self.name}: beta must be in (0, 1], got {self.beta}.")
        if not check_number(self.name, "reg", self.reg) >= 0.0:
            raise ValueError(f"{self.name}: reg must be >= 0, got {self.reg}.")

    def init(self, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> _History:
        batch, dim = z.shape
        slots = min(self.m, loop.max_iter) - 1  # a solve stores at most max_iter - 1 differences
        width = max(slots, 1)
        gram = torch.zeros(batch, width, width, dtype=torch.float64, device=z.device)
        index = tuple(torch.tensor([i], device=z.device) for i in range(width)) if loop.compiling else ()
        return _History(slots, z.new_zeros(batch, width + 1, dim), z.new_zeros(batch, width, dim), gram,
                        gram.new_zeros(batch, 0), index=index)  # fmt: skip

    def step(self, state: _History, z: Tensor, fz: Tensor, g: Tensor, loop: Loop) -> Step:
        base = fz if self.beta == 1.0 else torch.add(z, g, alpha=self.beta)  # z + beta g: the step before mixing
        if loop.compiling:
            return self._compiled_step(state, g, base, loop)
        if state.base is not None and state.slots > 0:
            _record(state, g, base)
        state.g, state.base = g, base
        n = min(state.k, state.slots)
        if n == 0:
            return Step(base, state)  # base may be fz, referenced as the best f(z): not temporary
        gamma = _mixing_weights(state.gram[:, :n, :n], state.rhs, self.reg).to(z.dtype).unsqueeze(1)  # (B, 1, n)
        mixed = torch.baddbmm(base.unsqueeze(1), gamma, state.steps[:, :n], alpha=-1).squeeze(1)
        return Step(mixed, state, temporary=True)

    def _compiled_step(self, state: _History, g: Tensor, base: Tensor, loop: Loop) -> Step:
        """The step of :meth:`step` through the compiled fixed-width kernel (``compile_step=True``)."""
        g_old, base_old = state.g, state.base
        state.g, state.base = g, base
        if g_old is None or base_old is None or state.slots == 0:  # no difference yet (or m = 1): a damped step
            return Step(base, state)
        slot = state.k % state.slots
        state.k += 1
        mix = loop.compiled(_record_and_mix)
        mixed = mix(state.dg, state.steps, state.gram, state.index[slot], g_old, base_old, g, base, self.reg)
        return Step(mixed, state, temporary=True)


def _record(state: _History, g: Tensor, base: Tensor) -> None:
    """Store the differences from the previous iterate to the current one (g, base) and update gram and rhs."""
    assert state.g is not None and state.base is not None
    slots, width = state.slots, state.dg.shape[1] - 1
    slot = state.k % slots
    torch.sub(g, state.g, out=state.dg[:, slot])
    torch.sub(base, state.base, out=state.steps[:, slot])
    state.dg[:, width].copy_(g)
    state.k += 1
    n = min(state.k, slots)
    pair = state.dg[:, slot :: width - slot]  # rows slot and width: (B, 2, D), no copy
    prod = torch.bmm(pair, state.dg[:, :n].transpose(1, 2)).double()  # (B, 2, n)
    state.gram[:, slot, :n] = prod[:, 0]
    state.gram[:, :n, slot] = prod[:, 0]
    state.rhs = prod[:, 1]


def _record_and_mix(
    dg: Tensor, steps: Tensor, gram: Tensor, slot: Tensor, g_old: Tensor, base_old: Tensor, g: Tensor, base: Tensor,
    reg: float,
) -> Tensor:  # fmt: skip
    """:func:`_record` and the mixing step as one kernel of fixed shapes, for torch.compile: store the differences
    from (g_old, base_old) to (g, base), all (B, D), in slot ``slot`` (int64, (1,)) of ``dg`` (B, width + 1, D; its
    last row is not used here) and ``steps`` (B, width, D), update ``gram`` (B, width, width) in place, and return
    base - steps^T gamma (B, D) with gamma over all width columns (zero for the columns not filled yet).
    """
    width = steps.shape[1]
    dg_new = g - g_old
    dg.index_copy_(1, slot, dg_new.unsqueeze(1))
    steps.index_copy_(1, slot, (base - base_old).unsqueeze(1))
    history = dg[:, :width]
    prod = torch.bmm(torch.stack([dg_new, g], dim=1), history.transpose(1, 2)).double()  # (B, 2, width)
    gram.index_copy_(1, slot, prod[:, :1])
    gram.index_copy_(2, slot, prod[:, :1].transpose(1, 2))
    gamma = _mixing_weights(gram, prod[:, 1], reg).to(g.dtype).unsqueeze(1)  # (B, 1, width)
    return torch.baddbmm(base.unsqueeze(1), gamma, steps, alpha=-1).squeeze(1)
