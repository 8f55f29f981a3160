"""Build a :class:`SequenceModel` from a :class:`~deq_lm.configs.Config`."""

from __future__ import annotations

from torch import nn

from deq_core import DEQ

from ..configs.config import Config, ModelConfig
from .bodies import DEQBody, UnrolledBody
from .heads import build_embedding_and_head, embedding_width
from .recurrent import RecurrentBody
from .sequence_model import SequenceModel
from .tcn import TCNBody
from .transformer import DEQTransformerCell, TransformerXLBody
from .trellisnet import TrellisNetCell


def build_deq(cfg: Config) -> DEQ:
    """The DEQ layer of the config's ``deq`` section (forward/backward solvers, limits, tolerances and options)."""
    return cfg.deq.layer()


def _transformer_cell(m: ModelConfig, d_in: int) -> DEQTransformerCell:
    return DEQTransformerCell(
        d_in, m.d_model, m.n_heads, m.d_head, m.d_ff, m.mem_len, m.dropout, m.pre_ln, m.weight_norm, m.attention
    )


def _trellis_cell(m: ModelConfig, d_in: int) -> TrellisNetCell:
    return TrellisNetCell(d_in, m.d_model, m.kernel, m.dilation, m.dropout, m.weight_norm)


def build_body(cfg: Config, d_in: int | None = None) -> nn.Module:
    """The body named by ``cfg.model.name`` for inputs of width ``d_in`` (default ``cfg.model.d_embed``); its output
    width is ``cfg.model.d_model``."""
    m = cfg.model
    d_in = m.d_embed if d_in is None else d_in
    if m.name == "deq_transformer":
        return DEQBody(_transformer_cell(m, d_in), build_deq(cfg))
    if m.name == "deq_trellisnet":
        return DEQBody(_trellis_cell(m, d_in), build_deq(cfg))
    if m.name == "transformer_tied":
        return UnrolledBody(_transformer_cell(m, d_in), m.n_layers)
    if m.name == "trellisnet":
        return UnrolledBody(_trellis_cell(m, d_in), m.n_layers)
    if m.name == "transformer_xl":
        return TransformerXLBody(
            d_in,
            m.d_model,
            m.n_heads,
            m.d_head,
            m.d_ff,
            m.n_layers,
            m.mem_len,
            m.dropout,
            m.pre_ln,
            m.weight_norm,
            m.attention,
        )
    if m.name in ("lstm", "gru"):
        return RecurrentBody(m.name, d_in, m.d_model, m.n_layers, m.dropout)
    if m.name == "tcn":
        return TCNBody(d_in, m.d_model, m.n_layers, m.kernel, m.dropout)
    raise ValueError(f"unknown model {m.name!r}")  # unreachable: ModelConfig checks the name


def build_model(cfg: Config, vocab_size: int) -> SequenceModel:
    """Embedding -> body -> head over ``vocab_size`` tokens: ``cfg.model.head`` "linear" (an nn.Embedding of width
    d_embed, a softmax over the body's d_model outputs) or "adaptive" (adaptive input and softmax with
    ``cfg.model.cutoffs`` and ``cfg.model.div_val``, both projecting to d_model); tied when
    ``cfg.model.tie_weights``."""
    m = cfg.model
    embedding, head = build_embedding_and_head(
        m.head, vocab_size, m.d_embed, m.d_model, m.cutoffs, m.div_val, tie=m.tie_weights
    )
    body = build_body(cfg, embedding_width(embedding))
    return SequenceModel(embedding, body, head, is_deq=cfg.is_deq)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
