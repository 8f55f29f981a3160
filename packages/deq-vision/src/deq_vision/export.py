"""Export a trained run for timm and the Hugging Face Hub: ``python -m deq_vision.export RUN OUT
[--trust-solver MODULE] [--push-to-hub REPO_ID]``.

RUN is a run directory (its newest complete checkpoint) or ``RUN/checkpoints/step_N``, loaded as
``python -m deq_vision.evaluate`` loads it (:func:`deq_vision.evaluate.load_model`). OUT gets what
``PretrainedClassifier.save_pretrained`` writes (:mod:`deq_vision.hub`): timm's layout, written by timm's own
``save_for_hf``: ``model.safetensors`` (the model's weights) and ``config.json`` (``architecture``, ``num_classes``,
``model_args``: the keywords that rebuild the same model, the DEQ layer among them as plain settings, and
``pretrained_cfg``: the run's eval preprocessing, input size, mean / std, crop, interpolation; ``training``: the run's
final metrics and config); the weights file carries the same settings in its header
(:mod:`deq_vision.models.weights_config`); and ``README.md``, the model card. Then, after ``import deq_vision``::

    timm.create_model("local-dir:OUT", pretrained=True)

gives the run's model (its logits equal those of the model evaluate loads), and
``timm.data.resolve_data_config(model=model)`` its eval transform; ``PretrainedClassifier.from_pretrained("OUT")`` gives
it with its ``transform()``. OUT may be an empty folder; anything in it is refused. ``--push-to-hub REPO_ID`` then
uploads it to the Hugging Face Hub (the repo is created if needed; log in first with ``hf auth login``). The model
weights are exported, not the EMA's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from deq_core.train.cli import add_trust_option, leave_working_directory, usage_error
from deq_core.train.errors import UsageError
from deq_core.train.hub import add_push_option, push_if_asked, save_new

from .hub import PretrainedClassifier

__all__ = ["export_run"]


def export_run(run: str | Path, out: str | Path, trusted_modules: Collection[str] = ()) -> Path:
    """Write the model of ``run`` (a run directory or one of its checkpoint folders) to ``out`` in timm's layout,
    ``model.safetensors`` + ``config.json`` + ``README.md`` (``PretrainedClassifier.from_run(...).save_pretrained``);
    returns ``out``. ``trusted_modules``: the modules whose solvers the run's
    config may name by import path (none else is imported). Written into ``OUT.partial`` and renamed when complete.

    Raises:
        FileNotFoundError: ``run`` is not a run or checkpoint folder.
        CheckpointError: (a ValueError) the checkpoint holds something else than tensors and plain data.
        FileExistsError: ``out`` exists and is not an empty folder.
        OutputError: ``out`` cannot be written (a link there or at ``OUT.partial``, a read-only folder, a full device).
        UntrustedImportError: (a ValueError) the run's config names a solver of a module not in ``trusted_modules``.
    """
    save_new(out, lambda: PretrainedClassifier.from_run(run, trusted_modules))
    return Path(out)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a user error (not a run, an unreadable checkpoint, OUT not empty or not writable, a push the Hub
    refused) is one line and exit status 2."""
    parser = argparse.ArgumentParser(prog="python -m deq_vision.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("out", type=Path, help="the folder to write model.safetensors, config.json and README.md to")
    add_push_option(parser)
    add_trust_option(parser)
    args = parser.parse_args(argv)
    try:
        leave_working_directory(args.trust_solver, args.run)
        model = save_new(args.out, lambda: PretrainedClassifier.from_run(args.run, args.trust_solver))
    except (FileNotFoundError, FileExistsError, ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    out = args.out
    print(f"wrote {out / 'model.safetensors'}, {out / 'config.json'} and {out / 'README.md'}")
    if push_if_asked(parser.prog, model, args.push_to_hub, args.out):
        return 2
    source = f"hf-hub:{args.push_to_hub}" if args.push_to_hub else f"local-dir:{out}"
    print(f'load with: import deq_vision; timm.create_model("{source}", pretrained=True)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
