"""Jacobian diagnostics and regularizers of a map f at a point z, through vector-Jacobian products.

- :func:`jacobian_frobenius`: Hutchinson estimate of ||J_f(z)||_F^2 / D, differentiable (the Jacobian-regularization
  loss of Bai, Koltun & Kolter 2021).
- :func:`spectral_radius`: estimate of the largest |eigenvalue| of J_f(z) per sample (Arnoldi iteration on v -> v J,
  a refinement of the power method that also handles complex dominant eigenvalue pairs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._state import (
    State,
    as_rows,
    as_tensors,
    check_output,
    detached_leaves,
    flatten,
    rebuild,
    solver_dtype,
    state_spec,
    unflatten,
)

__all__ = ["frobenius_from_graph", "jacobian_frobenius", "spectral_radius"]

_REDUCTIONS = ("mean", "none")


def vector_jacobian(
    outputs: Sequence[Tensor], inputs: Sequence[Tensor], cotangents: Sequence[Tensor], create_graph: bool = False
) -> tuple[Tensor, ...]:
    """v^T J_f for outputs = f(inputs), one tensor per input (zeros where an input does not reach any output).

    Outputs without a graph (constant in the inputs, e.g. a state component that f maps to a fixed tensor) contribute
    nothing instead of making ``torch.autograd.grad`` raise.
    """
    pairs = [(o, v) for o, v in zip(outputs, cotangents) if o.requires_grad]
    grads: Sequence[Tensor | None] = (None,) * len(inputs)
    if pairs:
        grads = torch.autograd.grad(
            [o for o, _ in pairs],
            list(inputs),
            [v for _, v in pairs],
            create_graph=create_graph,
            retain_graph=True,
            allow_unused=True,
        )
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs))


def frobenius_from_graph(
    fz: Sequence[Tensor], z: Sequence[Tensor], n_samples: int = 1, create_graph: bool = True
) -> Tensor:
    """Hutchinson estimate of ||J||_F^2 / D per sample from an existing graph fz = f(z).

    Args:
        fz: the tensors of f(z), computed with autograd from ``z``.
        z: the tensors f was applied to (requiring grad).
        n_samples: Gaussian probe vectors averaged.
        create_graph: keep the graph of the estimate so that it can be differentiated (for a training loss).

    Returns:
        Tensor (B,): sum over probes of ||v^T J||^2 / (n_samples * D), v ~ N(0, I).
    """
    if not (isinstance(n_samples, int) and n_samples >= 1):
        raise ValueError(f"n_samples must be an int >= 1, got {n_samples!r}.")
    dim = sum(math.prod(t.shape[1:]) for t in z)  # elements per sample (also for an empty batch)
    total = None
    for _ in range(n_samples):
        probes = [torch.randn_like(t) for t in fz]
        vjps = vector_jacobian(fz, z, probes, create_graph=create_graph)
        sq = sum(as_rows(g.float() if g.dtype in (torch.float16, torch.bfloat16) else g).pow(2).sum(1) for g in vjps)
        total = sq if total is None else total + sq
    assert total is not None
    return total / (n_samples * dim)


def jacobian_frobenius(f: Callable[[State], State], z: State, n_samples: int = 1, reduction: str = "mean") -> Tensor:
    """Hutchinson estimate of ||J_f(z)||_F^2 / D, differentiable with respect to f's parameters.

    Args:
        f: the map; its Jacobian is taken with respect to the state at ``z`` (z itself is detached).
        z: Tensor (B, ...) or tuple/list of such Tensors, batch first; D = elements per sample.
        n_samples: number of Gaussian probe vectors averaged (the estimate is unbiased for any n_samples).
        reduction: "mean" for the batch mean (a scalar, for the loss) or "none" for a Tensor (B,).

    Calls f once. Needs autograd: do not call it under torch.no_grad().
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of {list(_REDUCTIONS)}.")
    spec = state_spec(z, "z")
    if not torch.is_grad_enabled():
        raise RuntimeError("jacobian_frobenius needs autograd; call it outside torch.no_grad().")
    leaves = detached_leaves(z)
    fz = f(rebuild(z, leaves))
    check_output(fz, spec, f)
    per_sample = frobenius_from_graph(as_tensors(fz), leaves, n_samples=n_samples, create_graph=True)
    return per_sample.mean() if reduction == "mean" else per_sample


def spectral_radius(f: Callable[[State], State], z: State, n_iters: int = 20, seed: int | None = None) -> Tensor:
    """Estimate rho(J_f(z)) = max |eigenvalue| per sample, without tracking gradients.

    Builds an ``n_iters``-dimensional Krylov space of v -> v J_f(z) (vector-Jacobian products, one backward pass
    each; eigenvalues of J^T equal those of J) by Arnoldi with re-orthogonalization and returns the largest |Ritz
    value|. Exact for D <= n_iters; otherwise the dominant eigenvalue converges first.

    Args:
        f: the map; called once.
        z: the point, Tensor (B, ...) or tuple/list of Tensors.
        n_iters: Krylov dimension (number of vector-Jacobian products), >= 1.
        seed: seed of the random start vector (None: the global generator).

    Returns:
        Tensor (B,) in the solver dtype (float64 if z has a float64 tensor, else float32).
    """
    if not (isinstance(n_iters, int) and n_iters >= 1):
        raise ValueError(f"n_iters must be an int >= 1, got {n_iters!r}.")
    spec = state_spec(z, "z")
    dtype = solver_dtype(spec.dtypes)
    leaves = detached_leaves(z)
    with torch.enable_grad():
        fz = f(rebuild(z, leaves))
    check_output(fz, spec, f)
    fz_t = as_tensors(fz)

    def vjp(v: Tensor) -> Tensor:
        return flatten(vector_jacobian(fz_t, leaves, as_tensors(unflatten(v, spec))), dtype)

    batch, dim = spec.batch_size, spec.dim
    gen = None if seed is None else torch.Generator(device=spec.device).manual_seed(seed)
    v = torch.randn(batch, dim, dtype=dtype, device=spec.device, generator=gen)
    basis = [v / torch.linalg.vector_norm(v, dim=1, keepdim=True)]
    k = min(n_iters, dim)
    hess = torch.zeros(batch, k + 1, k, dtype=dtype, device=spec.device)
    for j in range(k):
        w = vjp(basis[j])
        for _ in range(2):  # Gram-Schmidt twice for orthogonality in floating point
            for i, q in enumerate(basis):
                h = (q * w).sum(1)
                hess[:, i, j] += h
                w = w - h[:, None] * q
        norm = torch.linalg.vector_norm(w, dim=1)
        scale = torch.linalg.vector_norm(hess[:, : j + 1, j], dim=1).clamp_min(torch.finfo(dtype).tiny)
        alive = norm > 100 * torch.finfo(dtype).eps * scale  # else: invariant subspace found, Ritz values exact
        hess[:, j + 1, j] = torch.where(alive, norm, torch.zeros_like(norm))
        basis.append(torch.where(alive[:, None], w / norm.clamp_min(torch.finfo(dtype).tiny)[:, None], 0 * w))
    ritz = torch.linalg.eigvals(hess[:, :k, :k])
    return ritz.abs().max(dim=1).values.to(dtype)
