"""Export a trained run's model with its vocabulary: ``python -m deq_lm.export RUN OUT [--data-dir DIR]
[--trust-solver MODULE] [--push-to-hub REPO_ID]``.

RUN is a run directory (its newest complete checkpoint) or ``RUN/checkpoints/step_N``, loaded as
``python -m deq_lm.evaluate`` loads it (a language model needs its corpus, at the directory saved in the run or
``--data-dir``, for its vocabulary). OUT gets what ``PretrainedLM.save_pretrained`` writes (:mod:`deq_lm.hub`):
``model.safetensors`` (the weights; tied weights stored once), ``config.json`` (the model and deq sections of the run,
the vocabulary's type, the run's final metrics), the vocabulary (``vocab.txt`` or ``tokenizer.model``) and
``README.md``, the model card. OUT may be an empty folder; anything in it is refused. ``--push-to-hub REPO_ID``
then uploads it to the Hugging Face Hub (the repo is created if needed; log in first with ``hf auth login``).

Load it back with ``deq_lm.hub.PretrainedLM.from_pretrained(OUT or REPO_ID)`` (model and vocabulary), or the model
alone with :func:`load_pretrained`. Loading reads JSON, text, SentencePiece and safetensors files only and imports
nothing named in them: a ``deq`` section whose solver is an import path is refused (pass ``deq=`` a layer you built).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

import deq_core
from deq_core.train.cli import add_trust_option, leave_working_directory, usage_error
from deq_core.train.errors import UsageError
from deq_core.train.hub import add_push_option, push_if_asked, save_new

from .hub import PretrainedLM
from .models import SequenceModel

__all__ = ["export_run", "load_pretrained"]


def export_run(
    run: str | Path, out: str | Path, data_dir: str | Path | None = None, trusted_modules: Collection[str] = ()
) -> Path:
    """Write the model of ``run`` (a run directory or one of its checkpoint folders) with its vocabulary and model
    card to ``out`` (``PretrainedLM.from_run(...).save_pretrained(out)``); returns ``out``. ``data_dir``: the corpus
    directory, if it moved (language modeling); ``trusted_modules``: the modules whose solvers the run's config may
    name by import path (none else is imported). Written into ``OUT.partial`` and renamed when complete.

    Raises:
        FileNotFoundError: ``run`` is not a run or checkpoint folder.
        CheckpointError: (a ValueError) the checkpoint holds something else than tensors and plain data.
        FileExistsError: ``out`` exists and is not an empty folder.
        OutputError: ``out`` cannot be written (a link there or at ``OUT.partial``, a read-only folder, a full device).
        UntrustedImportError: (a ValueError) the run's config names a solver of a module not in ``trusted_modules``.
    """
    save_new(out, lambda: PretrainedLM.from_run(run, data_dir, trusted_modules))
    return Path(out)


def load_pretrained(folder: str | Path, deq: deq_core.DEQ | None = None) -> SequenceModel:
    """The model exported to ``folder`` (``PretrainedLM.from_pretrained(folder, deq=deq).model``), with its weights,
    in eval mode; ``deq``: a DEQ layer to use instead of the one config.json describes (needed when the run's solver
    was given by import path, which loading does not import).

    Raises:
        HubModelError: (a ValueError) ``folder`` is not a model folder of deq-lm, or misses a file.
        ValueError: config.json names a solver by import path (``deq`` not given).
        CheckpointError: (a ValueError) a file holds something else than JSON / tensors, or weights that do not fit.
    """
    return PretrainedLM.from_pretrained(folder, deq=deq).model


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a user error (not a run, an unreadable checkpoint, OUT not empty or not writable, a push the Hub
    refused) is one line and exit status 2."""
    parser = argparse.ArgumentParser(prog="python -m deq_lm.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory or RUN/checkpoints/step_N")
    parser.add_argument("out", type=Path, help="the folder to write the model, its vocabulary and model card to")
    parser.add_argument("--data-dir", type=Path, default=None, help="language modeling: the corpus directory, if moved")
    add_push_option(parser)
    add_trust_option(parser)
    args = parser.parse_args(argv)
    try:
        leave_working_directory(args.trust_solver, args.run)
        model = save_new(args.out, lambda: PretrainedLM.from_run(args.run, args.data_dir, args.trust_solver))
    except (FileNotFoundError, FileExistsError, ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    print(f"wrote {args.out}: {', '.join(sorted(p.name for p in args.out.iterdir()))}")
    if push_if_asked(parser.prog, model, args.push_to_hub, args.out):
        return 2
    print(f"load with: deq_lm.hub.PretrainedLM.from_pretrained({str(args.push_to_hub or args.out)!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
