"""Build a :class:`SequenceModel` from a :class:`~deq_lm.configs.Config`."""

from __future__ import annotations

from torch import nn

from deq_core import DEQ

from ..configs.config import Config
from .bodies import DEQBody, UnrolledBody
from .recurrent import RecurrentBody
from .sequence_model import SequenceModel
from .tcn import TCNBody
from .transformer import DEQTransformerCell, TransformerXLBody
from .trellisnet import TrellisNetCell


def build_deq(cfg: Config) -> DEQ:
    """The DEQ layer with the config's forward/backward solvers, limits and tolerances."""
    return DEQ(
        solver=cfg.solver,
        max_iter=cfg.max_iter,
        tol=cfg.tol,
        stop_mode=cfg.stop_mode,
        backward=cfg.backward,
        backward_solver=cfg.backward_solver,
        backward_max_iter=cfg.backward_max_iter,
        backward_tol=cfg.backward_tol,
        eval_max_iter=cfg.eval_max_iter,
        eval_tol=cfg.eval_tol,
    )


def _transformer_cell(cfg: Config) -> DEQTransformerCell:
    return DEQTransformerCell(
        cfg.d_embed,
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.d_ff,
        cfg.mem_len,
        cfg.dropout,
        cfg.pre_ln,
        cfg.weight_norm,
    )


def _trellis_cell(cfg: Config) -> TrellisNetCell:
    return TrellisNetCell(cfg.d_embed, cfg.d_model, cfg.kernel, cfg.dilation, cfg.dropout, cfg.weight_norm)


def build_body(cfg: Config) -> nn.Module:
    """The body named by ``cfg.model``; its output width is ``cfg.d_model``."""
    if cfg.model == "deq_transformer":
        return DEQBody(_transformer_cell(cfg), build_deq(cfg))
    if cfg.model == "deq_trellisnet":
        return DEQBody(_trellis_cell(cfg), build_deq(cfg))
    if cfg.model == "transformer_tied":
        return UnrolledBody(_transformer_cell(cfg), cfg.n_layers)
    if cfg.model == "trellisnet":
        return UnrolledBody(_trellis_cell(cfg), cfg.n_layers)
    if cfg.model == "transformer_xl":
        return TransformerXLBody(
            cfg.d_embed, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.n_layers, cfg.mem_len, cfg.dropout,
            cfg.pre_ln, cfg.weight_norm,
        )  # fmt: skip
    if cfg.model in ("lstm", "gru"):
        return RecurrentBody(cfg.model, cfg.d_embed, cfg.d_model, cfg.n_layers, cfg.dropout)
    if cfg.model == "tcn":
        return TCNBody(cfg.d_embed, cfg.d_model, cfg.n_layers, cfg.kernel, cfg.dropout)
    raise ValueError(f"unknown model {cfg.model!r}")  # unreachable: Config checks the name


def build_model(cfg: Config, vocab_size: int) -> SequenceModel:
    """Embedding (vocab_size x d_embed) -> body -> head (d_model -> vocab_size)."""
    return SequenceModel(vocab_size, cfg.d_embed, build_body(cfg), cfg.d_model, is_deq=cfg.is_deq)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
