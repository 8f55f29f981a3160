"""Named configurations: ``get_config(name)``, ``PRESETS``, and the :class:`Config` dataclass."""

from .config import Config
from .presets import PRESETS, get_config

__all__ = ["PRESETS", "Config", "get_config"]
