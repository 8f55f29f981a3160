"""Shared helpers for the deq-core tests: call counters, state (un)flattening, random contractive maps and an
exact implicit-function-theorem reference built from dense Jacobians."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
import torch
from torch import Tensor

from deq_core import BUILTIN_SOLVERS

METHODS = tuple(BUILTIN_SOLVERS)  # every built-in solver's shorthand
FLOAT_DTYPES = (torch.float32, torch.float64)
# Shapes (without the batch dim) of the tensors of a tuple state of different shapes.
TUPLE_SHAPES = ((3, 4), (5,))


@dataclasses.dataclass(frozen=True)
class ExampleConfig:
    """A config dataclass with a field of each kind a training config has (for deq_core.train)."""

    lr: float = 1e-3
    steps: int = 10
    solver: Literal["anderson", "broyden"] = "anderson"
    sizes: tuple[int, ...] = (1, 2)
    name: str | None = None
    jitter: bool = False


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so that the suite is deterministic."""
    torch.manual_seed(1234)


class Counter:
    """Wraps a map and counts its calls (and remembers the dtypes it was called with)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.calls = 0
        self.input_dtypes: list[tuple[torch.dtype, ...]] = []

    def __call__(self, z):
        self.calls += 1
        tensors = (z,) if isinstance(z, Tensor) else tuple(z)
        self.input_dtypes.append(tuple(t.dtype for t in tensors))
        return self.fn(z)


def tensors_of(state) -> tuple[Tensor, ...]:
    return (state,) if isinstance(state, Tensor) else tuple(state)


def flat(state, dtype: torch.dtype | None = None) -> Tensor:
    """A state as one (B, D) tensor (in ``dtype`` if given)."""
    parts = [t.reshape(t.shape[0], -1) for t in tensors_of(state)]
    out = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
    return out if dtype is None else out.to(dtype)


def unflat(x: Tensor, like):
    """(B, D) -> the structure, shapes and dtypes of ``like``."""
    tensors = tensors_of(like)
    sizes = [t[0].numel() for t in tensors]
    parts = torch.split(x, sizes, dim=1)
    out = tuple(p.reshape(t.shape).to(t.dtype) for p, t in zip(parts, tensors))
    if isinstance(like, Tensor):
        return out[0]
    return type(like)(out)


def make_state(kind: str, batch: int, dtype: torch.dtype, fill: float | None = None):
    """A random (or constant) state: a (B, 6) tensor for kind="tensor", a tuple (B, 3, 4), (B, 5) for "tuple"."""
    shapes = ((6,),) if kind == "tensor" else TUPLE_SHAPES
    tensors = tuple(
        torch.randn(batch, *s, dtype=dtype) if fill is None else torch.full((batch, *s), fill, dtype=dtype)
        for s in shapes
    )
    return tensors[0] if kind == "tensor" else tensors


def state_dim(state) -> int:
    return sum(t[0].numel() for t in tensors_of(state))


def scaled_to_norm(mats: Tensor, norm: float) -> Tensor:
    """Scale every matrix of a (..., D, D) batch to spectral norm ``norm``."""
    sigma = torch.linalg.matrix_norm(mats, ord=2)
    return mats * (norm / sigma)[..., None, None]


def random_contractions(batch: int, dim: int, norm: float, dtype=torch.float64) -> Tensor:
    """(B, D, D) random matrices of spectral norm ``norm`` (float64 random draw, then cast)."""
    return scaled_to_norm(torch.randn(batch, dim, dim, dtype=torch.float64), norm).to(dtype)


def affine_map(mats: Tensor, bias: Tensor) -> Callable:
    """The per-sample affine map z -> A_b z + b_b on states structured like ``like`` (computed in z's dtypes)."""

    def f(z):
        x = flat(z)
        y = torch.einsum("bij,bj->bi", mats.to(x.dtype), x) + bias.to(x.dtype)
        return unflat(y, z)

    return f


def batched_jacobian(f_flat: Callable[[Tensor], Tensor], z: Tensor) -> Tensor:
    """(B, D, D) Jacobians of a map on (B, D) tensors that acts on each sample independently."""
    jac = torch.autograd.functional.jacobian(lambda x: f_flat(x).sum(0), z)  # (D_out, B, D_in)
    return jac.permute(1, 0, 2).contiguous()


def exact_fixed_point_layer(f_flat: Callable[[Tensor], Tensor], z_star: Tensor) -> Tensor:
    """A differentiable z* whose gradients are the exact implicit-function-theorem ones.

    With z* (detached, a fixed point of f) and the dense Jacobian J = J_f(z*) (detached), returns
    z* + (I - J)^{-1} (f(z*) - z*): its value is z* (up to the solve's residual) and its derivative with respect to
    anything f depends on is (I - J)^{-1} df/dtheta, by a dense linear solve.
    """
    z_star = z_star.detach()
    jac = batched_jacobian(f_flat, z_star).detach()
    eye = torch.eye(z_star.shape[1], dtype=z_star.dtype).expand_as(jac)
    g = f_flat(z_star) - z_star
    return z_star + torch.linalg.solve(eye - jac, g.unsqueeze(2)).squeeze(2)


def rel_err(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_quick_benchmark(script: str, out: Path) -> str:
    """Run ``benchmarks/SCRIPT --quick --out OUT`` on one thread in a fresh process; assert it succeeds and return the
    report written to ``out``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out.read_text()
