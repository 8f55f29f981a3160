"""Train a sequence model: ``python -m deq_lm.train --config NAME [--output-dir DIR] [--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (many GPUs, or several CPU processes with
``accelerate launch --multi_gpu --num_processes 2 -m deq_lm.train ...``). Without arguments it runs the main job:
the DEQ-Transformer on copy memory at a CPU-sized horizon (config ``copy-deq-transformer-quick``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from torch import Tensor, nn

from deq_core.train import (
    Forward,
    Parts,
    StepSchedule,
    Task,
    apply_overrides,
    cosine_lr_factor,
    replace_config,
    run_training_cli,
    training_parser,
)
from deq_core.train import train as run_skeleton

from .configs import PRESETS, Config, get_config
from .models import SequenceModel, build_model
from .problems import Problem, build_problem

MAIN_JOB = "copy-deq-transformer-quick"
# Settings that may change when a run is resumed (they do not change what is computed), by dotted name.
RESUMABLE_CHANGES = frozenset(
    {"run.stop_after", "run.save_grads_at", "run.eval_every", "run.log_every", "run.save_every",
     "run.keep_checkpoints", "data.n_test", "data.data_dir", "data.cache_dir"}
)  # fmt: skip


def evaluate_split(model: SequenceModel, problem: Problem, split: str, device: torch.device) -> dict[str, float]:
    """The problem's evaluation of ``model`` on a whole split in eval mode (the DEQ's eval limits apply): loss, metric
    and, for DEQs, mean forward NFE and residual. Restores the model's training mode."""
    was_training = model.training
    model.eval()
    try:
        return problem.evaluate(model, split, device)
    finally:
        model.train(was_training)


class SequenceTask(Task):
    """deq-lm's task for the training skeleton, on one problem (copy memory or language modeling): Adam with linear
    warmup and cosine decay, this process's rows of each global batch, and for language modeling the model's memory
    carried from one segment to the next (one per micro-batch, saved in each process's checkpoint file). The skeleton
    reads the config's ``run``, ``optim`` and ``deq`` sections itself (``run.eval_every`` 0: evaluate at the last step
    only)."""

    eval_splits = ("valid",)
    final_splits = ("test",)
    resumable = RESUMABLE_CHANGES

    def __init__(self, cfg: Config, offline: bool = False) -> None:
        self.cfg = cfg
        self.offline = offline  # a Hugging Face corpus from the local cache only
        self.memory: list[Any] | None = None
        self._problem: Problem | None = None

    @property
    def problem(self) -> Problem:
        if self._problem is None:
            raise RuntimeError("SequenceTask.build() has not been called.")
        return self._problem

    @property
    def metric(self) -> str:  # type: ignore[override]
        return self.problem.metric

    def build(self, accelerator: Accelerator) -> Parts:
        cfg = self.cfg
        with accelerator.main_process_first():  # the main process tokenizes a corpus once; the others read its cache
            self._problem = build_problem(cfg, offline=self.offline)
        optim = cfg.optim
        self.throughput = ("tokens", optim.batch_size * self.problem.seq_len)
        model = build_model(cfg, self.problem.vocab_size)
        optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: cosine_lr_factor(s, optim.steps, optim.warmup_steps, optim.min_lr_ratio)
        )
        return Parts(model, optimizer, scheduler)

    def train_batches(self, start: int, accelerator: Accelerator) -> Iterator[tuple[Tensor, Tensor]]:
        rank, world = accelerator.process_index, accelerator.num_processes
        for step in itertools.count(start):
            yield self.problem.train_batch(step, self.cfg.optim.batch_size, rank, world)

    def forward(self, model: nn.Module, batch: Any, schedule: StepSchedule) -> Forward:
        x, y = batch
        problem = self.problem
        batch_size = self.cfg.optim.batch_size
        fresh = not problem.stateful or problem.starts_stream(schedule.step, batch_size) or self.memory is None
        if schedule.micro == 0 and fresh:
            self.memory = [None] * schedule.micro_batches  # one state per micro-batch (its own rows)
        assert self.memory is not None
        out = model(x, self.memory[schedule.micro], targets=y)
        loss, metric = problem.loss_and_metric(out, y)
        if problem.stateful:
            self.memory[schedule.micro] = out.state
        return Forward(loss, {problem.metric: float(metric)}, out.info)

    def evaluate(self, model: nn.Module, split: str, accelerator: Accelerator) -> dict[str, float]:
        return self.problem.evaluate(model, split, accelerator.device)  # type: ignore[arg-type]

    def describe(self) -> str:
        batch = f"batches of {self.cfg.optim.batch_size} x {self.problem.seq_len} tokens"
        return f"{self.cfg.model.name}, {self.problem.describe()}, {batch}"

    def baseline(self) -> str:
        return self.problem.baseline()

    def warnings(self) -> list[str]:
        return self.problem.data_warnings()

    def process_state(self) -> dict[str, Any]:
        return {"memory": self.memory}

    def load_process_state(self, state: Mapping[str, Any], device: Any) -> None:
        self.memory = send_to_device(state["memory"], device)


def train(
    cfg: Config,
    output_dir: Path,
    name: str = "custom",
    resume: bool = False,
    offline: bool = False,
    trusted_modules: Collection[str] = (),
) -> dict[str, Any]:
    """Run (or resume) training in ``output_dir`` on the training skeleton (:func:`deq_core.train.trainer.train`),
    locked for the run; return the summary (step, last train loss and NFE, valid/test loss and metric). ``offline``:
    a Hugging Face corpus is read from the local cache only, never downloaded (as with HF_HUB_OFFLINE=1);
    ``trusted_modules``: the modules whose solvers the saved config.json may name by import path (``resume``).

    Raises:
        RunDirError: the folder is locked by another run, holds a run (without ``resume``) or nothing to resume.
        CheckpointError: the checkpoint to resume holds something else than tensors and plain data.
        UntrustedImportError: ``resume`` and the saved config names a solver of a module not in ``trusted_modules``.
    """
    return run_skeleton(
        SequenceTask(cfg, offline), cfg, Path(output_dir), resume=resume, trusted_modules=trusted_modules, name=name
    )


def build_parser() -> argparse.ArgumentParser:
    parser = training_parser(
        "python -m deq_lm.train", "Train a deq-lm model: --config NAME, then key=value overrides of its settings.",
        PRESETS, default=MAIN_JOB,
    )  # fmt: skip
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="language modeling: a folder with train.txt, valid.txt, test.txt, or with the splits in another form "
        "`datasets` reads: a save_to_disk folder, parquet / arrow / json / jsonl / txt files named by split (sets "
        "data.data_dir; default: the corpus from Hugging Face, downloaded once into its cache; data.dataset=NAME "
        "data.dataset_config=CONFIG: another Hugging Face dataset). Copy memory generates its data.",
    )  # fmt: skip
    parser.add_argument(
        "--offline", action="store_true",
        help="language modeling: read a Hugging Face corpus from the local cache only, never download (as "
        "HF_HUB_OFFLINE=1 does)",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer", choices=["word", "sentencepiece"], default=None, help="language modeling: sets data.tokenizer"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="language modeling: sets data.vocab_size (SentencePiece pieces)"
    )
    return parser


def _configure(args: argparse.Namespace) -> Config:
    """The preset with the overrides, then the data options (``--data-dir``, ``--tokenizer``, ``--vocab-size``)."""
    cfg = apply_overrides(get_config(args.config), args.overrides)
    data_dir = None if args.data_dir is None else str(args.data_dir)
    flags = {"data.data_dir": data_dir, "data.tokenizer": args.tokenizer, "data.vocab_size": args.vocab_size}
    return replace_config(cfg, {key: value for key, value in flags.items() if value is not None})


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for a user error, printed on one line)."""

    def run(cfg: Config, output_dir: Path, args: argparse.Namespace) -> None:
        train(cfg, output_dir, name=args.config, resume=args.resume, offline=args.offline,
              trusted_modules=args.trust_solver)  # fmt: skip

    return run_training_cli(build_parser(), argv, _configure, run)


if __name__ == "__main__":
    sys.exit(main())
