"""Named configurations: ``get_config(name)``, ``PRESETS``, and the :class:`Config` dataclass."""

from .config import MODELS, Config
from .presets import PRESETS, get_config

__all__ = ["MODELS", "PRESETS", "Config", "get_config"]
