"""Your own solver: a secant (Barzilai-Borwein) step written against deq-core's public solver protocol only.

    python packages/deq-core/examples/custom_solver.py

SecantStep implements ``init`` and ``step``; ``deq_core.solve`` runs the loop and its bookkeeping (NFE, residuals,
freezing of converged samples, best iterate, NaN isolation). The same object then serves as the forward and the
implicit-backward solver of a ``deq_core.DEQ`` layer. ``tests/test_custom_solver.py`` runs this file and checks it.
"""

from dataclasses import dataclass

import torch

import deq_core


@dataclass(frozen=True)
class SecantStep(deq_core.Solver):
    """z <- z + a (f(z) - z) with a per-sample step a from the last two iterates (Barzilai-Borwein)."""

    max_step: float = 10.0  # an option: a dataclass field, checked when the object is built

    def __post_init__(self):
        if not self.max_step >= 1.0:
            raise ValueError(f"SecantStep: max_step must be >= 1, got {self.max_step}.")

    def init(self, z, fz, g, loop):  # z0, f(z0), g = f(z0) - z0: (B, D) tensors
        return None  # the state: the previous (z, g), none yet

    def step(self, prev, z, fz, g, loop):
        a = torch.ones_like(z[:, :1])
        if prev is not None:
            dz, dg = z - prev[0], g - prev[1]
            a = -(dz * dg).sum(1, keepdim=True) / (dg * dg).sum(1, keepdim=True)
            a = a.nan_to_num(1.0).clamp(1.0, self.max_step)
        return deq_core.Step(z + a * g, (z, g), temporary=True)


torch.manual_seed(0)
q = torch.linalg.qr(torch.randn(64, 64, dtype=torch.float64))[0]
w = q @ torch.diag(torch.linspace(0, 0.97, 64, dtype=torch.float64)) @ q.T  # a slow, symmetric contraction
x = torch.randn(8, 64, dtype=torch.float64, requires_grad=True)
f = lambda z: torch.tanh(z @ w + x)
z0 = torch.zeros(8, 64, dtype=torch.float64)
res = deq_core.solve(f, z0, solver=SecantStep(), max_iter=100, tol=1e-8)
plain = deq_core.solve(f, z0, solver="fixed_point", max_iter=100, tol=1e-8)
print(res.summary(), "| fixed point:", plain.nfe)  # about 20 calls of f instead of 45
backward = deq_core.Implicit(SecantStep(max_step=5.0), max_iter=100, tol=1e-10)  # the adjoint solve too
deq = deq_core.DEQ(solver=SecantStep(), max_iter=100, tol=1e-8, backward=backward)
z, info = deq(f, z0)
z.sum().backward()  # x.grad: the implicit gradient, its adjoint system solved by SecantStep
