"""Sequence models: DEQ cells (DEQ-Transformer, DEQ-TrellisNet), explicit baselines, and the shared interface."""

from .bodies import DEQBody, UnrolledBody
from .factory import build_body, build_deq, build_model, count_parameters
from .interface import BodyOutput
from .recurrent import RecurrentBody
from .sequence_model import ModelOutput, SequenceModel
from .tcn import TCNBody
from .transformer import DEQTransformerCell, TransformerBlock, TransformerXLBody
from .trellisnet import TrellisNetCell

__all__ = [
    "BodyOutput",
    "DEQBody",
    "DEQTransformerCell",
    "ModelOutput",
    "RecurrentBody",
    "SequenceModel",
    "TCNBody",
    "TransformerBlock",
    "TransformerXLBody",
    "TrellisNetCell",
    "UnrolledBody",
    "build_body",
    "build_deq",
    "build_model",
    "count_parameters",
]
