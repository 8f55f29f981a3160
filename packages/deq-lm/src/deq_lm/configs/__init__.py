"""Named configurations: ``get_config(name)``, ``PRESETS``, ``PAPER_RESULTS``, the :class:`Config` dataclass and its
sections (:class:`DataConfig`, :class:`ModelConfig`, :class:`LMOptimConfig`; ``deq`` and ``run`` are deq-core's)."""

from .config import MODELS, Config, DataConfig, LMOptimConfig, ModelConfig
from .presets import PAPER_RESULTS, PRESETS, get_config

__all__ = ["MODELS", "PAPER_RESULTS", "PRESETS", "Config", "DataConfig", "LMOptimConfig", "ModelConfig", "get_config"]
