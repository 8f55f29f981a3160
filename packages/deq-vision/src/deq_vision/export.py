"""Export a trained run for timm: ``python -m deq_vision.export RUN OUT [--trust-solver MODULE]``.

RUN is a run directory (its newest complete checkpoint) or ``RUN/checkpoints/step_N``, loaded as
``python -m deq_vision.evaluate`` loads it (:func:`deq_vision.evaluate.load_model`). OUT gets timm's layout, written by
timm's own ``save_for_hf``: ``model.safetensors`` (the model's weights) and ``config.json`` (``architecture``,
``num_classes``, ``model_args``: the keywords that rebuild the same model, the DEQ layer among them as plain settings,
and ``pretrained_cfg``: the run's eval preprocessing, input size, mean / std, crop, interpolation); the weights file
carries the same settings in its header (:mod:`deq_vision.models.weights_config`). Then, after
``import deq_vision``::

    timm.create_model("local-dir:OUT", pretrained=True)

gives the run's model (its logits equal those of the model evaluate loads), and
``timm.data.resolve_data_config(model=model)`` its eval transform. OUT may be an empty folder; anything in it is
refused. The model weights are exported, not the EMA's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from safetensors.torch import save_model
from timm.models import save_for_hf

from deq_core.train.cli import add_trust_option, usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import write_folder

from .data import data_config
from .evaluate import load_model
from .models.registry import WEIGHTS_FILE, layer_settings
from .train import weights_metadata

__all__ = ["export_run"]


def export_run(run: str | Path, out: str | Path, trusted_modules: Collection[str] = ()) -> Path:
    """Write the model of ``run`` (a run directory or one of its checkpoint folders) to ``out`` in timm's layout,
    ``model.safetensors`` + ``config.json``; returns ``out``. ``trusted_modules``: the modules whose solvers the run's
    config may name by import path (none else is imported). Written into ``OUT.partial`` and renamed when complete.

    Raises:
        FileNotFoundError: ``run`` is not a run or checkpoint folder.
        CheckpointError: (a ValueError) the checkpoint holds something else than tensors and plain data.
        FileExistsError: ``out`` exists and is not an empty folder.
        OutputError: ``out`` cannot be written (a link there or at ``OUT.partial``, a read-only folder, a full device).
        UntrustedImportError: (a ValueError) the run's config names a solver of a module not in ``trusted_modules``.
    """
    out = Path(out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder: export into a new one.")
    cfg, model, _ = load_model(Path(run), trusted_modules)
    model_args = {"deq": layer_settings(cfg.deq)} if cfg.is_deq else {}
    description = f"{cfg.model.name} trained by deq-vision on {cfg.data.dataset} ({cfg.head_classes} classes)"

    def write(folder: Path) -> None:
        save_for_hf(
            model, folder, model_config={"pretrained_cfg": {"description": description}}, model_args=model_args,
            safe_serialization=True, data_config=data_config(cfg),
        )  # fmt: skip
        # The weights again, now with the run's settings in their header: the file alone rebuilds the model.
        save_model(model, str(folder / WEIGHTS_FILE), metadata=weights_metadata(cfg))

    return write_folder(out, write)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a user error (not a run, an unreadable checkpoint, OUT not empty or not writable) is one line and exit
    status 2."""
    parser = argparse.ArgumentParser(prog="python -m deq_vision.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("out", type=Path, help="the folder to write model.safetensors and config.json to")
    add_trust_option(parser)
    args = parser.parse_args(argv)
    try:
        out = export_run(args.run, args.out, args.trust_solver)
    except (FileNotFoundError, FileExistsError, ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    print(f"wrote {out / 'model.safetensors'} and {out / 'config.json'}")
    print(f'load with: import deq_vision; timm.create_model("local-dir:{out}", pretrained=True)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
