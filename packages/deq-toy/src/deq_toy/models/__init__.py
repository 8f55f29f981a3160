"""Models: the 1D DEQ, the GRU-cell DEQ and repeated GRU, and the explicit baselines; ``build_arithmetic_model``.

The DEQ models take one ready :class:`deq_core.DEQ` layer (``GRUDEQ(..., deq=...)``, ``ScalarDEQ(..., deq=...)``);
the builders make it from a config's ``deq`` section once (``config.deq.layer()``: :func:`arithmetic_deq`,
:func:`synthetic_deq`).

Every arithmetic model maps one-hot tokens (B, T, V) to ``(logits (B,), info)`` where info is a
:class:`deq_core.DEQInfo` for the DEQ and the repeated GRU and None for the explicit baselines.
"""

from __future__ import annotations

from torch import nn

from deq_core import DEQ

from ..configs.arithmetic import ArithmeticConfig
from ..configs.synthetic import SyntheticConfig
from ..data.arithmetic import SYMBOLS
from .baselines import FCClassifier, GRUClassifier
from .gru_deq import GRUDEQ, GRUCell, RepeatedGRU, report_deq
from .readout import Readout
from .scalar_deq import ScalarDEQ, paper_deq


def arithmetic_deq(config: ArithmeticConfig) -> DEQ:
    """The GRU-DEQ's layer from the config's ``deq`` section (by default Anderson with m = 6 for the forward solve
    and for the implicit backward's adjoint system)."""
    return config.deq.layer()


def synthetic_deq(config: SyntheticConfig) -> DEQ:
    """The 1D DEQ's layer from the config's ``deq`` section (solver, limits, stop modes, backward mode, Hutchinson
    probes, NaN handling)."""
    return config.deq.layer()


def build_arithmetic_model(config: ArithmeticConfig) -> nn.Module:
    """The model named by ``config.model.name`` with the config's sizes and solver settings."""
    model = config.model
    vocab, hidden, length, readout = len(SYMBOLS), model.hidden, config.data.length, model.readout
    if model.name == "fc":
        return FCClassifier(vocab, hidden, length)
    if model.name == "gru":
        return GRUClassifier(vocab, hidden, length, readout, layers=1)
    if model.name == "stacked_gru":
        return GRUClassifier(vocab, hidden, length, readout, layers=3)
    if model.name == "repeated_gru":
        return RepeatedGRU(vocab, hidden, length, readout, repeats=model.repeats)
    if model.name == "deq":
        return GRUDEQ(vocab, hidden, length, readout, deq=arithmetic_deq(config))
    raise ValueError(f"unknown model {model.name!r}")


def build_scalar_model(config: SyntheticConfig) -> ScalarDEQ:
    """The 1D DEQ with the config's width, feedback and DEQ layer (:func:`synthetic_deq`)."""
    return ScalarDEQ(width=config.model.width, deq=synthetic_deq(config), feedback=config.model.feedback)


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
    "arithmetic_deq",
    "build_arithmetic_model",
    "build_scalar_model",
    "paper_deq",
    "report_deq",
    "synthetic_deq",
]
