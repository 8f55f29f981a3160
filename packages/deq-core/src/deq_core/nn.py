"""Building blocks that DEQ cells rely on: weight normalization computed once per solve, and variational dropout
whose mask stays fixed across the solver's iterations.

Weight normalization (w = g v / ||v||) is torch's own parametrization. Recomputing it on every call of f repeats
the same work once per solver iteration; :func:`cached_weights` computes every parametrized weight of a module once,
with autograd when it is enabled, and reuses it for all calls inside the block (the ``weight_norm`` benchmark in
``benchmarks/`` measures the difference).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm as _torch_weight_norm

__all__ = ["VariationalDropout", "cached_weights", "weight_norm"]


def weight_norm(module: nn.Module, name: str = "weight", dim: int = 0) -> nn.Module:
    """Reparametrize ``module.<name>`` as g * v / ||v|| (norms over every dim but ``dim``); returns the module."""
    return _torch_weight_norm(module, name=name, dim=dim)


@contextmanager
def cached_weights(module: nn.Module) -> Iterator[None]:
    """Compute each parametrized weight of ``module`` (e.g. weight-normalized ones) once and reuse it in the block.

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
