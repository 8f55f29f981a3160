"""Models: the 1D DEQ, the GRU-cell DEQ and repeated GRU, and the explicit baselines; ``build_arithmetic_model``.

Every arithmetic model maps one-hot tokens (B, T, V) to ``(logits (B,), info)`` where info is a
:class:`deq_core.DEQInfo` for the DEQ and the repeated GRU and None for the explicit baselines.
"""

from __future__ import annotations

from torch import nn

from ..configs.arithmetic import ArithmeticConfig
from ..configs.synthetic import SyntheticConfig
from ..data.arithmetic import SYMBOLS
from .baselines import FCClassifier, GRUClassifier
from .gru_deq import GRUDEQ, GRUCell, RepeatedGRU
from .readout import Readout
from .scalar_deq import ScalarDEQ


def build_arithmetic_model(config: ArithmeticConfig) -> nn.Module:
    """The model named by ``config.model`` with the config's sizes and solver settings."""
    vocab, hidden, length = len(SYMBOLS), config.hidden, config.length
    if config.model == "fc":
        return FCClassifier(vocab, hidden, length)
    if config.model == "gru":
        return GRUClassifier(vocab, hidden, length, config.readout, layers=1)
    if config.model == "stacked_gru":
        return GRUClassifier(vocab, hidden, length, config.readout, layers=3)
    if config.model == "repeated_gru":
        return RepeatedGRU(vocab, hidden, length, config.readout, repeats=config.repeats)
    if config.model == "deq":
        return GRUDEQ(
            vocab,
            hidden,
            length,
            config.readout,
            anderson_m=config.anderson_m,
            max_iter=config.max_iter,
            tol=config.tol,
            backward_max_iter=config.backward_max_iter,
            backward_tol=config.backward_tol,
        )
    raise ValueError(f"unknown model {config.model!r}")


def build_scalar_model(config: SyntheticConfig) -> ScalarDEQ:
    """The 1D DEQ with the config's width and solver settings."""
    return ScalarDEQ(
        width=config.width,
        solver=config.solver,
        max_iter=config.max_iter,
        tol=config.tol,
        backward_max_iter=config.backward_max_iter,
        backward_tol=config.backward_tol,
        jacobian_samples=config.jacobian_samples,
        feedback=config.feedback,
    )


def any_length(model: nn.Module) -> bool:
    """Whether the model accepts inputs of a length other than the one it was built for."""
    readout = getattr(model, "readout", None)
    return isinstance(readout, Readout) and readout.any_length


__all__ = [
    "GRUDEQ",
    "FCClassifier",
    "GRUCell",
    "GRUClassifier",
    "Readout",
    "RepeatedGRU",
    "ScalarDEQ",
    "any_length",
    "build_arithmetic_model",
    "build_scalar_model",
]
