"""deq-toy on the training skeleton (:func:`deq_core.train.train`): :class:`ToyTask`, deq-toy's task, runs one
experiment (Adam + cosine schedule, batches a function of (seed, step), every process taking its rows of each batch)
and :func:`run_training` trains one config."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from deq_core.train import Forward, Parts, StepSchedule, Task, cosine_lr_factor, replace_config, set_threads, train

from .configs import ArithmeticConfig, Config
from .experiments import Experiment, build_experiment, step_budget

# Settings that may change when a run is resumed (they do not change what is computed), by dotted name.
RESUMABLE_CHANGES = frozenset({"run.threads", "run.save_every", "run.keep_checkpoints", "run.stop_after"})


class ToyTask(Task):
    """deq-toy's task for the training skeleton; its experiment (data, then model) is built after the seed is set. The
    skeleton reads the config's ``run``, ``optim`` and ``deq`` sections itself; the run takes the step budget of
    ``optim.epochs`` (cut at ``optim.max_steps``) and evaluates once per epoch when ``run.eval_every`` is 0."""

    eval_splits = ("valid",)
    resumable = RESUMABLE_CHANGES

    def __init__(self, config: Config, data_dir: Path) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.metric = "acc" if isinstance(config, ArithmeticConfig) else "mse"
        optim = config.optim
        self.eval_period, self.steps = step_budget(
            config.data.n_train, optim.batch_size, optim.epochs, getattr(optim, "max_steps", 0)
        )
        self.find_unused_parameters = isinstance(config, ArithmeticConfig)  # the GRU-DEQ's initial guess: no grad
        self._experiment: Experiment | None = None

    @property
    def experiment(self) -> Experiment:
        if self._experiment is None:
            raise RuntimeError("ToyTask.build() has not been called.")
        return self._experiment

    def build(self, accelerator: Any) -> Parts:
        cfg = self.config
        with accelerator.main_process_first():  # the main process writes missing data files; the others read them
            self._experiment = build_experiment(cfg, self.data_dir)
        optimizer = torch.optim.Adam(
            self.experiment.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        total = self.experiment.total_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cosine_lr_factor(step, total))
        return Parts(self.experiment.model, optimizer, scheduler)

    def train_batches(self, start: int, accelerator: Any) -> Iterator[tuple[Tensor, ...]]:
        rank, world = accelerator.process_index, accelerator.num_processes
        for step in itertools.count(start):
            yield tuple(t[rank::world] for t in self.experiment.batch(step))

    def forward(self, model: nn.Module, batch: Any, schedule: StepSchedule) -> Forward:
        return self.experiment.forward(model, batch)

    def evaluate(self, model: nn.Module, split: str, accelerator: Any) -> dict[str, float]:
        return self.experiment.evaluate()

    def describe(self) -> str:
        cfg = self.config
        model = getattr(cfg.model, "name", "scalar_deq")
        return f"{cfg.data.task} task, model {model}, batches of {cfg.optim.batch_size}"

    def baseline(self) -> str:
        return self.experiment.baseline()

    def finish(self, output_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
        return self.experiment.finish(output_dir, records)


def run_training(
    config: Config,
    output_dir: str | Path,
    data_dir: str | Path = "data",
    resume: bool = False,
    stop_after: int | None = None,
    progress: bool = True,
    name: str = "custom",
    trusted_modules: Collection[str] = (),
) -> dict[str, Any]:
    """Train ``config`` on the training skeleton and write OUTPUT_DIR/{config.json, metrics.jsonl,
    checkpoints/step_N/, summary.json, training.png, results.json, task figures}, holding the folder's lock.

    Args:
        config: a preset with overrides applied; ``name``: the preset's name (saved in config.json).
        output_dir: the run's folder.
        data_dir: where arithmetic data files are read from (and generated into when missing).
        resume: continue from the newest complete checkpoint of OUTPUT_DIR (same config required).
        stop_after: stop (with a checkpoint) once this many steps are done in all, without the final evaluation;
            a later call with ``resume=True`` continues. Sets ``run.stop_after`` (None: the config's).
        progress: show a progress bar (when stderr is a terminal).
        trusted_modules: the modules whose solvers the saved config.json may name by import path (``resume``).

    Returns:
        the experiment's final results (empty when stopped early by ``stop_after``).

    Raises:
        UsageError: a bad folder (locked, holding a run without ``resume``, nothing to resume: RunDirError), a
            checkpoint that is not tensors and plain data (CheckpointError), another config on resume
            (ResumeConfigError), a saved solver of a module not in ``trusted_modules`` (UntrustedImportError), more
            ``run.threads`` than this machine's cores allow (:func:`~deq_core.train.cli.set_threads`), or bad data.
    """
    set_threads(config.run.threads, "run.threads")
    if stop_after is not None:
        config = replace_config(config, {"run.stop_after": stop_after})
    summary = train(
        ToyTask(config, Path(data_dir)), config, Path(output_dir), resume=resume, trusted_modules=trusted_modules,
        name=name, progress=progress,
    )  # fmt: skip
    return summary.get("results", {})
