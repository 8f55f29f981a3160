"""The 1D DEQ of the Jacobian-regularization paper (section 5.1): f(z; x) = W2^T ReLU(W1 z + U x + b)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from deq_core import DEQ, DEQInfo, Implicit, Solver


def paper_deq(
    solver: Solver | str = "broyden",
    max_iter: int = 100,
    tol: float = 1e-3,
    backward_max_iter: int = 50,
    backward_tol: float = 1e-6,
    jacobian_samples: int = 1,
) -> DEQ:
    """The 1D DEQ's default layer: ``solver`` to absolute residual |f(z) - z| <= ``tol`` in ``max_iter``
    iterations; implicit backward by Broyden to absolute residual ``backward_tol`` in ``backward_max_iter``;
    ``jacobian_samples`` Hutchinson probes; samples whose f turns NaN/Inf are warned about and left out of the
    gradient (``on_nonfinite="warn"``)."""
    return DEQ(
        solver=solver,
        max_iter=max_iter,
        tol=tol,
        stop_mode="abs",
        backward=Implicit("broyden", max_iter=backward_max_iter, tol=backward_tol, stop_mode="abs"),
        jacobian_samples=jacobian_samples,
        on_nonfinite="warn",
    )


class ScalarDEQ(nn.Module):
    """y_hat(x) = z*, the fixed point of f(z; x) = W2^T ReLU(W1 z + U x + b) with scalar z and x.

    Parameters W1, W2, U, b in R^width (4 * width parameters: 200 for width 50). W1 and W2 start at N(0, 1/width)
    so that the initial |df/dz| is about 0.1 and the layer starts contractive; U and b start at N(0, 1).

    Args:
        width: hidden units.
        deq: the :class:`deq_core.DEQ` layer (solver, limits, backward mode, Hutchinson probes for the Jacobian
            loss). None: :func:`paper_deq`, Broyden to absolute residual 1e-3 in 100 iterations, implicit Broyden
            backward to absolute residual 1e-6 in 50, NaN/Inf samples warned about and left out of the gradient.
        feedback: False fixes W1 at 0 (not trained), so f ignores z and z* = f(0; x) = W2^T ReLU(U x + b): the
            explicit 150-parameter network that a fully flattened DEQ becomes (a reference for the fit alone).
    """

    def __init__(
        self,
        width: int = 50,
        deq: DEQ | None = None,
        feedback: bool = True,
    ) -> None:
        super().__init__()
        w1 = torch.randn(width) / math.sqrt(width)
        self.w1 = nn.Parameter(w1 if feedback else torch.zeros(width), requires_grad=feedback)
        self.w2 = nn.Parameter(torch.randn(width) / math.sqrt(width))
        self.u = nn.Parameter(torch.randn(width))
        self.b = nn.Parameter(torch.randn(width))
        if deq is not None and not isinstance(deq, DEQ):
            raise TypeError(f"deq must be a deq_core.DEQ layer (or None for paper_deq()), got {type(deq).__name__}.")
        self.deq = paper_deq() if deq is None else deq

    def f(self, z: Tensor, x: Tensor) -> Tensor:
        """f(z; x) for z, x of shape (B, 1) (or broadcastable (..., 1)); returns (..., 1)."""
        hidden = torch.relu(z * self.w1 + x * self.u + self.b)
        return (hidden * self.w2).sum(-1, keepdim=True)

    def df_dz(self, z: Tensor, x: Tensor) -> Tensor:
        """Exact df/dz at (z, x), shape (..., 1): sum_i W2_i W1_i [W1_i z + U_i x + b_i > 0]."""
        active = (z * self.w1 + x * self.u + self.b > 0).to(z.dtype)
        return (active * self.w1 * self.w2).sum(-1, keepdim=True)

    def forward(self, x: Tensor) -> tuple[Tensor, DEQInfo]:
        """x (B, 1) -> (z* (B, 1), info); ``info.jacobian_loss`` is the batch mean of (df/dz)^2 when the layer's plan
        asks for it (``deq_core.use_plan(model, deq_core.Plan(jacobian_loss=True))``)."""
        z0 = torch.zeros_like(x)
        z_star, info = self.deq(lambda z: self.f(z, x), z0)
        assert isinstance(z_star, Tensor)
        return z_star, info
