"""Export a trained run's model: ``python -m deq_lm.export RUN OUT [--data-dir DIR] [--trust-solver MODULE]``; load it
back with :func:`load_pretrained`.

RUN is a run directory (its newest complete checkpoint) or ``RUN/checkpoints/step_N``, loaded as
``python -m deq_lm.evaluate`` loads it (:func:`deq_lm.evaluate.load_model`; a language model needs its corpus, at the
directory saved in the run or ``--data-dir``, for its vocabulary size). OUT gets the layout timm uses for image
models: ``model.safetensors`` (the weights; tied weights stored once) and ``config.json``::

    {"architecture": "deq_transformer", "vocab_size": 10, "task": "copy_memory",
     "model": {the run's model section}, "deq": {the run's deq section (DEQ models only)}, "deq_lm_version": ...}

``deq_lm.export.load_pretrained(OUT)`` rebuilds the model from these and returns it in eval mode; its outputs equal
those of the model evaluate loads. Loading reads JSON and safetensors only and imports nothing named in the file: a
``deq`` section whose solver is an import path is refused (pass ``deq=`` a layer you built). The tokenizer is not
exported: a language model's vocabulary stays with its corpus cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from safetensors.torch import save_model

import deq_core
from deq_core.train.checkpoints import load_weights, read_json
from deq_core.train.cli import add_trust_option, usage_error
from deq_core.train.deq_config import DEQConfig
from deq_core.train.errors import UsageError
from deq_core.train.files import write_folder
from deq_core.train.run_config import config_from_dict
from deq_core.train.trust import check_import_paths

from . import __version__
from .configs import Config
from .evaluate import load_model
from .models import SequenceModel, build_model

__all__ = ["export_run", "load_pretrained"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def export_run(
    run: str | Path, out: str | Path, data_dir: str | Path | None = None, trusted_modules: Collection[str] = ()
) -> Path:
    """Write the model of ``run`` (a run directory or one of its checkpoint folders) to ``out``:
    ``model.safetensors`` + ``config.json``; returns ``out``. ``data_dir``: the corpus directory, if it moved
    (language modeling); ``trusted_modules``: the modules whose solvers the run's config may name by import path
    (none else is imported). Written into ``OUT.partial`` and renamed when complete.

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
    data = None if data_dir is None else Path(data_dir)
    cfg, task, model, _ = load_model(Path(run), data, trusted_modules=trusted_modules)
    config: dict[str, Any] = {
        "architecture": cfg.model.name, "vocab_size": task.vocab_size, "task": cfg.data.task,
        "model": dataclasses.asdict(cfg.model),
    }  # fmt: skip
    if cfg.is_deq:
        config["deq"] = dataclasses.asdict(cfg.deq)
    config["deq_lm_version"] = __version__

    def write(folder: Path) -> None:
        save_model(model, str(folder / WEIGHTS_FILE))
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    return write_folder(out, write)


def load_pretrained(folder: str | Path, deq: deq_core.DEQ | None = None) -> SequenceModel:
    """The model exported to ``folder`` by :func:`export_run`, with its weights, in eval mode.

    Args:
        folder: holds ``config.json`` and ``model.safetensors``.
        deq: a DEQ layer to use instead of the one config.json describes (needed when the run's solver was given by
            import path, which loading does not import).

    Raises:
        FileNotFoundError: no config.json or model.safetensors in ``folder``.
        ValueError: config.json is not an export of deq-lm, or names a solver by import path (``deq`` not given).
        CheckpointError: (a ValueError) a file holds something else than JSON / tensors.
    """
    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} does not exist: write the folder with python -m deq_lm.export.")
    config = read_json(folder / CONFIG_FILE)
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict) or "vocab_size" not in config:
        raise ValueError(f"{folder / CONFIG_FILE} is not a deq-lm export (no model section and vocab_size).")
    values: dict[str, Any] = {"data": {"task": config.get("task", "copy_memory")}, "model": config["model"]}
    if deq is None and isinstance(config.get("deq"), dict):
        check_import_paths(
            DEQConfig, config["deq"], (), "deq.", fix="build that layer and pass load_pretrained(..., deq=layer)"
        )
        values["deq"] = config["deq"]
    cfg = config_from_dict(Config, values)
    model = build_model(cfg, int(config["vocab_size"]))
    if deq is not None and cfg.is_deq:
        model.body.deq = deq  # type: ignore[union-attr]
    load_weights(model, folder / WEIGHTS_FILE)
    return model.eval()


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a user error (not a run, an unreadable checkpoint, OUT not empty or not writable) is one line and exit
    status 2."""
    parser = argparse.ArgumentParser(prog="python -m deq_lm.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("out", type=Path, help="the folder to write model.safetensors and config.json to")
    parser.add_argument("--data-dir", type=Path, default=None, help="language modeling: the corpus directory, if moved")
    add_trust_option(parser)
    args = parser.parse_args(argv)
    try:
        out = export_run(args.run, args.out, args.data_dir, args.trust_solver)
    except (FileNotFoundError, FileExistsError, ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    print(f"wrote {out / WEIGHTS_FILE} and {out / CONFIG_FILE}; load with deq_lm.export.load_pretrained({str(out)!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
