"""deq-core in one page: an implicit layer inside a model, trained for a few steps, with its solver statistics.

    python packages/deq-core/examples/quickstart.py

A DEQ cell z* = tanh(W z* + U x + b) replaces a deep weight-tied stack; the head reads z*. The script fits random
targets for 60 steps with Anderson forward / Broyden implicit backward and Jacobian regularization, then checks the
implicit gradient against the exact implicit-function-theorem gradient (dense solve, float64).
"""

from __future__ import annotations

import torch
from torch import nn

import deq_core


class ImplicitRegressor(nn.Module):
    """x (B, n_in) -> y (B, n_out) through the fixed point z* (B, width) of z = tanh(W z + U x)."""

    def __init__(self, n_in: int, width: int, n_out: int) -> None:
        super().__init__()
        self.inject = nn.Linear(n_in, width)
        self.cell = deq_core.weight_norm(nn.Linear(width, width, bias=False))
        self.head = nn.Linear(width, n_out)
        self.deq = deq_core.DEQ(solver="anderson", max_iter=40, tol=1e-5, backward=deq_core.Implicit("broyden"))

    def forward(self, x: torch.Tensor, jacobian_loss: bool = False) -> tuple[torch.Tensor, deq_core.DEQInfo]:
        u = self.inject(x)
        with deq_core.cached_weights(self):
            z, info = self.deq(lambda z: torch.tanh(self.cell(z) + u), torch.zeros_like(u), jacobian_loss=jacobian_loss)
        return self.head(z), info


def main() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(256, 16), torch.randn(256, 4)
    model = ImplicitRegressor(16, 64, 4)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(60):
        pred, info = model(x, jacobian_loss=True)
        loss = nn.functional.mse_loss(pred, y)
        (loss + 0.5 * info.jacobian_loss).backward()
        opt.step()
        opt.zero_grad()
        if step % 10 == 0 or step == 59:
            print(
                f"step {step:3d}  loss {loss.item():.4f}  jac {info.jacobian_loss.item():.4f}  "
                f"nfe fwd {info.nfe:2d} bwd {info.nfe_backward:2d}  "
                f"residual max {info.residual.max().item():.1e}  converged {int(info.converged.sum())}/{len(x)}"
            )

    # Implicit gradient vs the exact one, in float64.
    model = model.double()
    model.deq = deq_core.DEQ(tol=1e-12, max_iter=300, backward=deq_core.Implicit(max_iter=300, tol=1e-12))
    xb = x[:8].double()
    pred, _ = model(xb)
    grad_implicit = torch.autograd.grad(pred.sum(), model.inject.weight)[0]
    with torch.no_grad():
        u = model.inject(xb)
        z = deq_core.solve(lambda z: torch.tanh(model.cell(z) + u), torch.zeros_like(u), tol=1e-13, max_iter=500).z
        w = model.cell.weight
        d = 1 - torch.tanh(z @ w.T + u) ** 2  # (B, width): diag of tanh' at z*
        eye = torch.eye(w.shape[0], dtype=w.dtype)
        grad_exact = torch.zeros_like(model.inject.weight)
        for b in range(len(xb)):
            jac = d[b, :, None] * w  # J_f(z*)
            dl_dz = model.head.weight.sum(0)  # d(sum pred)/dz
            adj = torch.linalg.solve((eye - jac).T, dl_dz) * d[b]  # dL/d(pre-activation)
            grad_exact += torch.outer(adj, xb[b])
    err = (grad_implicit - grad_exact).norm() / grad_exact.norm()
    print(f"implicit vs exact gradient, relative error: {err:.2e}")
    assert err < 1e-8, "implicit gradient does not match the exact one"


if __name__ == "__main__":
    main()
