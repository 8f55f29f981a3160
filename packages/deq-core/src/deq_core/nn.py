"""Building blocks that DEQ cells rely on: weight and spectral normalization computed once per solve, and variational
dropout whose mask stays fixed across the solver's iterations.

Weight normalization (w = g v / ||v||) and spectral normalization (W / sigma(W)) are torch's own parametrizations.
Recomputing them on every call of f repeats the same work once per solver iteration (and, for spectral
normalization, a power-iteration step that changes W during the solve); :func:`cached_weights` computes every
parametrized weight of a module once, with autograd when it is enabled, and reuses it for all calls inside the block
(the ``weight_norm`` benchmark in ``benchmarks/`` measures the difference).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm as _torch_spectral_norm
from torch.nn.utils.parametrizations import weight_norm as _torch_weight_norm

__all__ = ["VariationalDropout", "cached_weights", "spectral_norm", "weight_norm"]


def weight_norm(module: nn.Module, name: str = "weight", dim: int = 0) -> nn.Module:
    """Reparametrize ``module.<name>`` as g * v / ||v|| (norms over every dim but ``dim``); returns the module."""
    return _torch_weight_norm(module, name=name, dim=dim)


def spectral_norm(
    module: nn.Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> nn.Module:
    """Reparametrize ``module.<name>`` as W / sigma(W), sigma the largest singular value of W (as a matrix of rows
    along ``dim``: 0, or 1 for transposed convolutions, when None); returns the module.

    torch's spectral-norm parametrization (Miyato et al. 2018): sigma is estimated by power iteration, with
    ``n_power_iterations`` steps each time the weight is computed in training mode (none in eval mode), from vectors
    kept as buffers of the module (15 + n_power_iterations steps when registered); the gradient treats those vectors
    as constants. The estimate never exceeds sigma_1, so ||W / sigma||_2 = sigma_1 / sigma >= 1, approaching 1: after
    k steps the vectors' error shrinks like (sigma_2 / sigma_1)^(2 k), and 1 - sigma / sigma_1 like its square. A
    cell tanh(c W z + x) with c < 1 is then a contraction, of factor c sigma_1 / sigma, for any input x.

    Compute the weight once per DEQ call with :func:`cached_weights`: then each forward runs one power-iteration
    update, and the solve and the tracked call f(z*) use one W. Without it, every call of f in training mode runs a
    power-iteration step, so W changes from one solver iteration to the next.
    """
    return _torch_spectral_norm(module, name=name, n_power_iterations=n_power_iterations, eps=eps, dim=dim)


@contextmanager
def cached_weights(module: nn.Module) -> Iterator[None]:
    """Compute each parametrized weight of ``module`` (e.g. weight- or spectrally normalized ones) once and reuse it
    in the block.

    Use it around the DEQ call in a cell's forward::

        with deq_core.cached_weights(self):
            z, info = self.deq(lambda z: self.f(z, x), z0)

    The weights are computed on entry, in the current autograd mode, so that the solver's calls (without autograd)
    and the tracked call f(z*) share one weight tensor that still carries gradients to g and v.
    """
    with parametrize.cached():
        for sub in module.modules():
            if parametrize.is_parametrized(sub):
                for name in sub.parametrizations:
                    getattr(sub, name)
        yield


class VariationalDropout(nn.Module):
    """Dropout with one mask per forward pass, shared by every solver iteration (and optionally along some dims).

    Call :meth:`reset_mask` with a tensor shaped like the input before the solve; every call then multiplies by
    the same mask (entries 0 or 1 / (1 - p)). In eval mode, or with p = 0, it is the identity.

    Args:
        p: drop probability in [0, 1).
        shared_dims: dims of the input along which one mask value is shared (e.g. the sequence dim, so that a
            feature is dropped at every position: the "variational" dropout of Gal & Ghahramani).
    """

    def __init__(self, p: float, shared_dims: Sequence[int] = ()) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout p must be in [0, 1), got {p}.")
        self.p = p
        self.shared_dims = tuple(shared_dims)
        self.mask: Tensor | None = None

    def extra_repr(self) -> str:
        return f"p={self.p}, shared_dims={self.shared_dims}"

    def reset_mask(self, like: Tensor) -> None:
        """Draw a new mask for inputs shaped like ``like`` (call once per forward pass, before the solve)."""
        if not self.training or self.p == 0.0:
            self.mask = None
            return
        shape = list(like.shape)
        for d in self.shared_dims:
            shape[d] = 1
        keep = torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(1.0 - self.p)
        self.mask = keep / (1.0 - self.p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.mask is None:
            raise RuntimeError(
                "VariationalDropout has no mask: call reset_mask(x) once per forward pass, before the DEQ solve."
            )
        try:
            return x * self.mask
        except RuntimeError as err:
            raise RuntimeError(
                f"VariationalDropout mask of shape {tuple(self.mask.shape)} does not fit the input of shape "
                f"{tuple(x.shape)}: call reset_mask with a tensor shaped like the input."
            ) from err
