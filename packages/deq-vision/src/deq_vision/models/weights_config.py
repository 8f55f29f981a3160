"""The settings a weights file carries, so that a loader given only the file rebuilds the model it belongs to.

A training checkpoint's and an export's ``model.safetensors`` hold, in their safetensors header (the metadata entry
:data:`CONFIG_KEY`, JSON text):

- ``architecture``: the timm name of the model (``"mdeq_large_cifar10"``);
- ``pretrained_cfg``: the data the model was trained on and is evaluated with, in timm's terms (:data:`DATA_KEYS`:
  ``input_size`` (C, H, W), ``mean`` / ``std``, ``crop_pct``, ``crop_mode``, ``interpolation``, ``num_classes``);
- ``deq``: the DEQ layer the run trained and evaluated with, as plain settings (solvers, limits, tolerances, stop rules,
  backward mode, eval limits; :func:`~deq_vision.models.deq_layer.layer_settings`); absent for an explicit network.

``timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=...))`` (and ``dict(hf_hub_id=...)``)
reads them before building the model (:func:`deq_vision.models.build.build_model`); nothing here imports code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_KEY", "DATA_KEYS", "read_weights_config", "weights_metadata"]

CONFIG_KEY = "deq_vision.config"
DATA_KEYS: tuple[str, ...] = ("input_size", "mean", "std", "crop_pct", "crop_mode", "interpolation", "num_classes")


def weights_metadata(
    architecture: str, pretrained_cfg: Mapping[str, Any], deq: Mapping[str, Any] | None
) -> dict[str, str]:
    """The safetensors metadata of a weights file: {``CONFIG_KEY``: JSON of the architecture, the ``pretrained_cfg``
    entries of :data:`DATA_KEYS` and the DEQ layer settings ``deq`` (None: an explicit network)}. One entry only:
    safetensors writes several in a random order, and the same weights would not always give the same bytes."""
    config: dict[str, Any] = {
        "architecture": architecture,
        "pretrained_cfg": {key: pretrained_cfg[key] for key in DATA_KEYS if key in pretrained_cfg},
    }
    if deq is not None:
        config["deq"] = dict(deq)
    return {CONFIG_KEY: json.dumps(config)}


def read_weights_config(path: str | Path) -> dict[str, Any] | None:
    """What :func:`weights_metadata` wrote into the safetensors file ``path`` (read from its header only), or None
    when the file carries none (weights written by an earlier deq-vision or by other code).

    Raises:
        ValueError: one line naming the file: it cannot be read as safetensors, or its entry is not the JSON object
            this module writes.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as weights:
            text = (weights.metadata() or {}).get(CONFIG_KEY)
    except Exception as err:  # safetensors raises its own error types for a missing or foreign file
        raise ValueError(f"{path} cannot be read as a safetensors file ({type(err).__name__}: {err}).") from None
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        config = None
    if not (isinstance(config, dict) and isinstance(config.get("architecture"), str)
            and isinstance(config.get("pretrained_cfg"), dict)
            and isinstance(config.get("deq", {}), dict)):  # fmt: skip
        raise ValueError(
            f"{path}: its {CONFIG_KEY!r} entry is not the settings deq-vision writes; the file was changed after it "
            "was written: export the run again (python -m deq_vision.export RUN OUT)."
        )
    return config
