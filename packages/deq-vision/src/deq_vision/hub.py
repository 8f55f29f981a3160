"""A trained deq-vision classifier saved, loaded and pushed as Hugging Face users expect
(:class:`deq_core.train.hub.HubModel`, huggingface_hub's ``ModelHubMixin``), in timm's own layout::

    from deq_vision.hub import PretrainedClassifier

    model = PretrainedClassifier.from_run("RUN")       # a run's newest checkpoint (or RUN/checkpoints/step_N)
    model.save_pretrained("OUT")                       # config.json, model.safetensors, README.md
    model.push_to_hub("user/mdeq-cifar10")             # after `hf auth login` (or token=...)
    model = PretrainedClassifier.from_pretrained("user/mdeq-cifar10")   # or the folder "OUT"
    logits = model(model.transform()(image)[None])     # image: a PIL image; transform: the run's eval preprocessing

The folder is the one timm's ``save_for_hf`` writes (``python -m deq_vision.export`` writes the same), so timm alone
loads it too, after ``import deq_vision``: ``timm.create_model("hf-hub:user/mdeq-cifar10", pretrained=True)`` or
``"local-dir:OUT"``. Its ``config.json`` holds ``architecture``, ``num_classes``, ``model_args`` (the keywords that
rebuild the model; an MDEQ's DEQ layer among them as plain settings: solvers, limits, tolerances, stop rules, backward
mode, eval limits), ``pretrained_cfg`` (the run's eval preprocessing: input size, mean / std, crop, interpolation),
``training`` (preset, step, config and final metrics: :func:`deq_core.train.hub.run_record`) and
``deq_vision_version``; ``model.safetensors`` carries the architecture, data and DEQ settings in its header too
(:mod:`deq_vision.models.weights_config`). The model card, ``README.md``, shows the solver settings, metrics and
config. Loading reads JSON and safetensors only and imports nothing named in a file: a DEQ layer whose solver is an
import path is refused (pass ``deq=`` a layer you built). The model's weights are saved, not the EMA's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import timm
from timm.data import create_transform, resolve_data_config
from timm.models import save_for_hf
from torch import Tensor, nn

import deq_core
from deq_core.train.checkpoints import WEIGHTS_FILE, load_weights, resolve_checkpoint
from deq_core.train.files import write_file
from deq_core.train.hub import (
    SAVE_OPTION,
    CardFields,
    HubModel,
    HubModelError,
    required_file,
    run_record,
    weights_writer,
)

from . import __version__
from .data import data_config
from .evaluate import load_model
from .models import MODEL_NAMES
from .models.deq_layer import layer_settings
from .models.weights_config import DATA_KEYS, weights_metadata

__all__ = ["PretrainedClassifier"]

LIBRARY = "deq-vision"
VERSION_KEY = "deq_vision_version"  # in config.json: written by deq-vision


def _settings(config: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """What a saved folder's config.json says of the model: {"architecture", "model_args", "data", "description",
    "training"}.

    Raises:
        HubModelError: config.json is not timm's layout of a deq-vision model.
    """
    architecture, model_args = config.get("architecture"), config.get("model_args", {})
    pretrained_cfg = config.get("pretrained_cfg")
    ours = VERSION_KEY in config or architecture in MODEL_NAMES
    if not (isinstance(architecture, str) and isinstance(model_args, dict) and isinstance(pretrained_cfg, dict)):
        raise HubModelError(
            f"{folder / 'config.json'} is not a deq-vision model's (no architecture, model_args and pretrained_cfg of "
            "timm's layout): load it with the library that wrote it."
        )
    if not ours:
        raise HubModelError(
            f"{folder / 'config.json'} is timm's {architecture!r}, not saved by deq-vision: load it with "
            f'timm.create_model("local-dir:{folder}", pretrained=True).'
        )
    return {
        "architecture": architecture, "model_args": model_args,
        "data": {key: pretrained_cfg[key] for key in DATA_KEYS if key in pretrained_cfg and key != "num_classes"},
        "description": pretrained_cfg.get("description", ""), "training": config.get("training"),
    }  # fmt: skip


class PretrainedClassifier(
    nn.Module, HubModel, library_name=LIBRARY, pipeline_tag="image-classification", tags=["timm"]
):
    """A trained timm classifier of deq-vision (an MDEQ, or its explicit twin) with the run's preprocessing and
    record (see the module's docstring).

    Args:
        model: the timm model (``self.model``); calling this module calls it.
        settings: {"architecture": timm name, "model_args": the keywords that rebuild it (``{"deq": layer settings}``
            for an MDEQ), "data": its eval preprocessing in timm's ``pretrained_cfg`` terms, "description": one
            line, "training": the run's record (:func:`~deq_core.train.hub.run_record`) or None}; :meth:`from_run`
            builds them.
    """

    def __init__(self, model: nn.Module, settings: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.settings = dict(settings)

    @classmethod
    def from_run(cls, run: str | Path, trusted_modules: Collection[str] = ()) -> PretrainedClassifier:
        """The model of a training run (its newest complete checkpoint, or ``RUN/checkpoints/step_N``), loaded as
        ``python -m deq_vision.evaluate`` loads it; ``trusted_modules``: the modules whose solvers the run's config may
        name by import path (none else is imported).

        Raises:
            FileNotFoundError: not a run or checkpoint folder.
            ValueError: a config or checkpoint that cannot be used (a CheckpointError, an UntrustedImportError).
        """
        run_dir, checkpoint = resolve_checkpoint(Path(run))
        cfg, model, _ = load_model(checkpoint, trusted_modules)
        description = f"{cfg.model.name} trained by deq-vision on {cfg.data.dataset} ({cfg.head_classes} classes)"
        settings = {
            "architecture": cfg.model.name, "model_args": {"deq": layer_settings(cfg.deq)} if cfg.is_deq else {},
            "data": data_config(cfg), "description": description, "training": run_record(run_dir, checkpoint),
        }  # fmt: skip
        return cls(model, settings)

    @classmethod
    def _from_folder(
        cls, folder: Path, config: dict[str, Any], deq: deq_core.DEQ | None = None
    ) -> PretrainedClassifier:
        """The model of a folder (:meth:`from_pretrained`'s work): built by timm from config.json (``local-dir:``,
        the DEQ layer from its settings, or ``deq`` when given), then its weights loaded and checked."""
        settings = _settings(config, folder)
        weights = required_file(folder, WEIGHTS_FILE, "the weights", LIBRARY)
        extra = {} if deq is None else {"deq": deq}
        model = timm.create_model(f"local-dir:{folder}", pretrained=False, **extra)
        load_weights(model, weights)
        return cls(model, settings).eval()

    def _save_pretrained(self, save_directory: Path) -> None:
        """timm's own ``save_for_hf`` (config.json and model.safetensors, with the run's preprocessing, DEQ layer and
        record), then the weights again with these settings in their header (written aside and renamed)."""
        settings, model = self.settings, self.model
        model_config = {"pretrained_cfg": {"description": settings["description"]}, "training": settings["training"],
                        VERSION_KEY: __version__}  # fmt: skip
        save_for_hf(
            model, save_directory, model_config=model_config, model_args=settings["model_args"],
            safe_serialization=True, data_config=settings["data"],
        )  # fmt: skip
        data = {**settings["data"], "num_classes": model.num_classes}
        metadata = weights_metadata(settings["architecture"], data, settings["model_args"].get("deq"))
        write_file(Path(save_directory) / WEIGHTS_FILE, weights_writer(model, metadata), option=SAVE_OPTION)

    def hub_files(self) -> dict[str, Callable[[Path], None]]:
        """Not used: timm's ``save_for_hf`` writes the folder (:meth:`_save_pretrained`)."""
        return {}

    def card_fields(self) -> CardFields:
        """The model card: what the model is and was trained on, how to use it, its solver, metrics and config."""
        settings = self.settings
        record = settings.get("training")
        size = "x".join(str(n) for n in settings["data"].get("input_size", ()))
        summary = f"`{settings['architecture']}`: {settings['description']}; inputs {size}."
        usage = (
            "from deq_vision.hub import PretrainedClassifier\n\n"
            'model = PretrainedClassifier.from_pretrained("REPO_ID")\n'
            "logits = model(model.transform()(image)[None])  # image: a PIL image\n\n"
            "# or with timm alone (deq_vision registers the architecture):\n"
            "import deq_vision, timm\n"
            'model = timm.create_model("hf-hub:REPO_ID", pretrained=True)'
        )
        return CardFields(
            title=f"{settings['architecture']} (deq-vision)", summary=summary, usage=usage,
            solver=settings["model_args"].get("deq"), record=record,
        )  # fmt: skip

    def forward(self, images: Tensor, **options: Any) -> Any:
        """``self.model(images, **options)``: images (B, C, H, W), preprocessed by :meth:`transform`; returns logits
        (B, num_classes) (an MDEQ with ``return_info=True``: also the ``deq_core.DEQInfo``)."""
        return self.model(images, **options)

    def transform(self) -> Callable[[Any], Tensor]:
        """timm's eval transform of the model's ``pretrained_cfg`` (the run's resize, crop and normalization): a PIL
        image -> a (C, H, W) tensor."""
        return create_transform(**resolve_data_config(model=self.model), is_training=False)
