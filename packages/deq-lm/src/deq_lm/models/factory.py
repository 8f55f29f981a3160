"""Build a :class:`SequenceModel` from a :class:`~deq_lm.configs.Config`."""

from __future__ import annotations

from torch import nn

from deq_core import DEQ

from ..configs.config import Config
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


def _transformer_cell(cfg: Config, d_in: int) -> DEQTransformerCell:
    return DEQTransformerCell(
        d_in,
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.d_ff,
        cfg.mem_len,
        cfg.dropout,
        cfg.pre_ln,
        cfg.weight_norm,
    )


def _trellis_cell(cfg: Config, d_in: int) -> TrellisNetCell:
    return TrellisNetCell(d_in, cfg.d_model, cfg.kernel, cfg.dilation, cfg.dropout, cfg.weight_norm)


def build_body(cfg: Config, d_in: int | None = None) -> nn.Module:
    """The body named by ``cfg.model`` for inputs of width ``d_in`` (default ``cfg.d_embed``); its output width is
    ``cfg.d_model``."""
    d_in = cfg.d_embed if d_in is None else d_in
    if cfg.model == "deq_transformer":
        return DEQBody(_transformer_cell(cfg, d_in), build_deq(cfg))
    if cfg.model == "deq_trellisnet":
        return DEQBody(_trellis_cell(cfg, d_in), build_deq(cfg))
    if cfg.model == "transformer_tied":
        return UnrolledBody(_transformer_cell(cfg, d_in), cfg.n_layers)
    if cfg.model == "trellisnet":
        return UnrolledBody(_trellis_cell(cfg, d_in), cfg.n_layers)
    if cfg.model == "transformer_xl":
        return TransformerXLBody(
            d_in, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.n_layers, cfg.mem_len, cfg.dropout,
            cfg.pre_ln, cfg.weight_norm,
        )  # fmt: skip
    if cfg.model in ("lstm", "gru"):
        return RecurrentBody(cfg.model, d_in, cfg.d_model, cfg.n_layers, cfg.dropout)
    if cfg.model == "tcn":
        return TCNBody(d_in, cfg.d_model, cfg.n_layers, cfg.kernel, cfg.dropout)
    raise ValueError(f"unknown model {cfg.model!r}")  # unreachable: Config checks the name


def build_model(cfg: Config, vocab_size: int) -> SequenceModel:
    """Embedding -> body -> head over ``vocab_size`` tokens: ``cfg.head`` "linear" (an nn.Embedding of width
    d_embed, a softmax over the body's d_model outputs) or "adaptive" (adaptive input and softmax with ``cfg.cutoffs``
    and ``cfg.div_val``, both projecting to d_model); tied when ``cfg.tie_weights``."""
    embedding, head = build_embedding_and_head(
        cfg.head, vocab_size, cfg.d_embed, cfg.d_model, cfg.cutoffs, cfg.div_val, tie=cfg.tie_weights
    )
    body = build_body(cfg, embedding_width(embedding))
    return SequenceModel(embedding, body, head, is_deq=cfg.is_deq)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
