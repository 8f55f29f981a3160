"""deq-vision: multiscale deep equilibrium models (MDEQ) for image classification.

Importing the package registers the MDEQ architectures with timm, so that ``timm.create_model("mdeq_large_cifar10")``
works after ``import deq_vision``.
"""

from . import models  # noqa: F401  (registers the timm model names)
from .models import MDEQ, MODEL_NAMES, create_model

__version__ = "0.7.0"

__all__ = ["MDEQ", "MODEL_NAMES", "create_model"]
