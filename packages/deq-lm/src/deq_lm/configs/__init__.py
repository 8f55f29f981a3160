"""Named configurations: ``get_config(name)``, ``PRESETS``, ``PAPER_RESULTS`` and the :class:`Config` dataclass."""

from .config import MODELS, Config
from .presets import PAPER_RESULTS, PRESETS, get_config

__all__ = ["MODELS", "PAPER_RESULTS", "PRESETS", "Config", "get_config"]
