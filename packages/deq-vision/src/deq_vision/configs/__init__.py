"""Named configurations: ``get_config(name)``, ``PRESETS``, and the :class:`Config` dataclass with its sections
(:class:`DataConfig`, :class:`ModelConfig`, :class:`VisionOptimConfig`; ``deq`` and ``run`` are deq-core's)."""

from .config import Config, DataConfig, ModelConfig, VisionOptimConfig
from .presets import PRESETS, get_config

__all__ = ["PRESETS", "Config", "DataConfig", "ModelConfig", "VisionOptimConfig", "get_config"]
