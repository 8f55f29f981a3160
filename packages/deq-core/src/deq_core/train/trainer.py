"""The training skeleton shared by the task packages: :func:`train` runs a :class:`~deq_core.train.task.Task` on
Accelerate, with the settings of its config's sections ``run``, ``optim`` and ``deq`` read where they are used.

It owns devices and processes (``Accelerator(cpu=True)`` without CUDA, so that ``accelerate launch --multi_gpu
--num_processes N`` / ``torchrun`` processes join on CPU too), mixed precision, gradient accumulation and clipping,
the DEQ step (:func:`schedule_at`, handed to every DEQ layer of the model by :func:`deq_core.use_plan`), the
metrics file, the progress bar and console lines, crash-safe checkpoints
(:mod:`deq_core.train.state`: written aside, renamed when complete, tensors and plain data only) with bit-exact
resume, the training plot, and experiment trackers (``run.log_with``: every metrics line and the config, under
OUTPUT_DIR/trackers/; ended when training ends or fails). Files of OUTPUT_DIR: config.json, metrics.jsonl,
checkpoints/step_N/, summary.json, training.png, trackers/ (and what :meth:`Task.finish` writes).

Mixed precision: the config's when it sets one, else the launcher's (``accelerate launch --mixed_precision``); the
precision used is recorded in config.json and summary.json (``mixed_precision``) and kept on resume
(:mod:`deq_core.train.launch`). Several processes wait ``run.dist_timeout`` seconds for each other; a collective that
times out stops the run with a line naming the ranks that did not answer
(:class:`~deq_core.train.launch.ProcessTimeoutError`), one that loses a process that died with a line saying so
(:class:`~deq_core.train.launch.ProcessLostError`).

config.json records torch's intra-op thread count (``torch_threads``): it changes the floating-point rounding of
reductions, so a run resumed with another count is not bit-identical to an uninterrupted one; such a resume is
recorded in the ``resumed`` list of config.json and said in one console line.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import uuid
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import (
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    ProjectConfiguration,
    send_to_device,
    set_seed,
)
from safetensors.torch import save_file, save_model
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import DEQ, Plan, use_plan
from ..layer import UNCONVERGED_WARNING
from .checkpoints import CONFIG_FILE, clean_partial_checkpoints, load_weights, prune_checkpoints, read_json
from .errors import UsageError
from .files import write_file, write_json
from .launch import (
    PRECISION_ENV,
    PRECISION_KEY,
    ProcessLostError,
    ProcessTimeoutError,
    choose_precision,
    is_collective_timeout,
    is_peer_lost,
    liveness_group,
    lost_line,
    process_group_kwargs,
    recorded_precision,
    refuse_sharded_modes,
    unanswered_line,
)
from .metrics import MetricsLog
from .plots import plot_training
from .progress import progress_enabled
from .run_config import ResumeConfigError, check_resume_config, record_resume, save_config, saved_run_config
from .rundir import RunLock, check_run_dir
from .schedules import jittered_max_iter
from .state import TrainState, load_training_checkpoint, save_training_checkpoint
from .task import Forward, StepSchedule, Task
from .trackers import (
    TRACKER_ID_KEY,
    TRACKERS_DIR,
    check_tracker_folders,
    check_trackers_installed,
    hyperparameters,
    tracker_init_kwargs,
    tracker_values,
)

__all__ = [
    "THREADS_KEY",
    "Run",
    "StepStats",
    "TrainingDivergedError",
    "build_accelerator",
    "diverged_line",
    "evaluate",
    "final_line",
    "log_record",
    "micro_batches",
    "schedule_at",
    "progress_postfix",
    "run_steps",
    "save_checkpoint",
    "save_gradients",
    "setup_run",
    "start_trackers",
    "step_scheduler",
    "threads_line",
    "train",
    "train_record",
    "train_step",
]

THREADS_KEY = "torch_threads"  # the top-level entry of config.json with torch's intra-op thread count


def build_accelerator(
    mixed_precision: str | None = None,
    find_unused_parameters: bool = False,
    *,
    log_with: Collection[str] = (),
    output_dir: str | Path | None = None,
    dist_timeout: float = 600.0,
) -> Accelerator:
    """An Accelerator that joins the processes of ``accelerate launch`` / ``torchrun``, also on CPU (where a plain
    ``Accelerator()`` would let each process train alone), with a seedable sampler so that prepared data loaders
    reshuffle per epoch from the seed (the same batches after a resume). ``mixed_precision`` None: the launcher's
    (ACCELERATE_MIXED_PRECISION), else "no". ``log_with``: trackers writing under OUTPUT_DIR/trackers/ (``output_dir``
    is then needed). ``dist_timeout``: seconds a collective waits for the other processes."""
    project = None
    if output_dir is not None:
        project = ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(Path(output_dir) / TRACKERS_DIR))
    return Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision=mixed_precision,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        kwargs_handlers=[
            DistributedDataParallelKwargs(find_unused_parameters=find_unused_parameters),
            process_group_kwargs(dist_timeout),
        ],
        log_with=list(dict.fromkeys(log_with)) or None,  # a name given twice starts one tracker
        project_config=project,
    )


def micro_batches(batch: tuple[Tensor, ...], n: int) -> list[tuple[Tensor, ...]]:
    """Split a batch (a tuple of tensors with the batch dimension first) into ``n`` equal micro-batches.

    Raises:
        ValueError: the rows cannot be split evenly.
    """
    rows = batch[0].shape[0]
    if rows % n:
        raise ValueError(f"{rows} rows per process cannot be split into {n} micro-batches (grad_accum).")
    return list(zip(*(t.chunk(n) for t in batch), strict=True))


def schedule_at(config: Any, step: int, has_deq: bool = True) -> StepSchedule:
    """The schedule of optimizer step ``step`` (0-based) of a config with sections ``run``, ``optim`` and ``deq``: the
    micro-batches of ``optim.grad_accum`` and, when the model has DEQ layers (``has_deq``), what they do
    (:class:`deq_core.Plan`): the pretraining unroll, the jittered forward limit (None without ``deq.max_iter_jitter``:
    the layers' own ``max_iter``) and the Jacobian term, each a function of (``run.seed``, step) only. The Jacobian
    term is computed in equilibrium steps only, never while pretraining unrolls f (as the reference DEQ and MDEQ code
    do); the draws of the steps after pretraining do not depend on it."""
    micro_batches = config.optim.grad_accum
    if not has_deq:
        return StepSchedule(step, micro_batches=micro_batches)
    deq, seed = config.deq, config.run.seed
    jacobian = deq.jacobian_schedule(seed)
    limit = jittered_max_iter(deq.max_iter, deq.max_iter_jitter, seed, step) if deq.max_iter_jitter else None
    unroll = deq.pretrain_schedule().unroll_at(step)
    layer_plan = Plan(unroll=unroll, max_iter=limit, jacobian_loss=unroll is None and jacobian.active(step))
    return StepSchedule(step, micro_batches=micro_batches, deq=layer_plan, jacobian_weight=jacobian.weight_at(step))


@dataclass
class StepStats:
    """Statistics of one optimizer step on this process, averaged over its micro-batches."""

    mode: str
    lr: float
    jacobian: bool
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, out: Forward) -> None:
        """Record one micro-batch (after its backward pass, so that the DEQ's backward statistics are set)."""
        record = {"loss": float(out.loss.detach()), **out.stats}
        if out.info is not None:
            record.update(out.info.statistics())
        for key, value in record.items():
            self.values.setdefault(key, []).append(float(value))

    def means(self) -> dict[str, float]:
        return {k: sum(v) / len(v) for k, v in self.values.items()}


@dataclass
class Run:
    """Everything a training run holds, built by :func:`setup_run`. ``config``: the task's config (sections ``run``,
    ``optim``, ``deq``); ``name``: the run's name (the preset); ``has_deq``: the model has DEQ layers."""

    task: Task
    config: Any
    output_dir: Path
    accelerator: Accelerator
    model: nn.Module  # prepared (e.g. wrapped in DistributedDataParallel)
    unwrapped: nn.Module  # the model itself, unwrapped
    optimizer: Any
    scheduler: Any
    state: TrainState
    log: MetricsLog
    name: str = "custom"
    has_deq: bool = False
    progress: bool = True
    summary: dict[str, Any] = field(default_factory=dict)
    config_file: dict[str, Any] = field(default_factory=dict)  # what config.json holds (main process)
    liveness: Any = None  # a spare gloo group to find the ranks that stopped answering (several processes)

    @property
    def is_main(self) -> bool:
        """Whether this is the main process (it writes the run's files)."""
        return self.accelerator.is_main_process

    @property
    def steps(self) -> int:
        """Optimizer steps in all: the task's ``steps``, else the config's ``optim.steps``."""
        return run_steps(self.task, self.config)

    @property
    def eval_every(self) -> int:
        """Steps between evaluations: ``run.eval_every``, else the task's ``eval_period``, else all the steps."""
        return self.config.run.eval_every or self.task.eval_period or self.steps

    def objects(self) -> dict[str, Any]:
        """The state-dict objects of a checkpoint besides the weights."""
        objects = {"optimizer": self.optimizer, "scheduler": self.scheduler, **self.task.checkpoint_objects()}
        if self.accelerator.scaler is not None:
            objects["scaler"] = self.accelerator.scaler
        return objects


def run_steps(task: Task, config: Any) -> int:
    """The optimizer steps of a run: ``task.steps`` when the task sets it (e.g. from epochs), else ``optim.steps``.

    Raises:
        ValueError: neither gives a number >= 1.
    """
    steps = task.steps or getattr(config.optim, "steps", 0)
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"a run needs steps >= 1 (the task's steps or the config's optim.steps), got {steps!r}.")
    return steps


def setup_run(
    task: Task, config: Any, output_dir: Path, resume: bool, trusted_modules: Collection[str] = (),
    name: str = "custom", progress: bool = True,
) -> Run:  # fmt: skip
    """Build the accelerator and the task's parts; with ``resume``, load the newest complete checkpoint of
    ``output_dir`` (refusing a config that changes what is computed, or whose solver import path names a module
    outside ``trusted_modules``: see :mod:`~deq_core.train.trust`). Call it holding the folder's RunLock. A resumed
    run whose config.json was deleted gets it back from the checkpoint's copy (and is checked against it); its
    metrics.jsonl must hold the lines the checkpoint counted (:meth:`~deq_core.train.metrics.MetricsLog.resume_at`).

    config.json gets the task's :meth:`~deq_core.train.task.Task.config_extra` entries and torch's thread count
    (``torch_threads``); a resume with another thread count is recorded in its ``resumed`` list and said in one line
    (the run is no longer bit-identical). Mixed precision: :func:`~deq_core.train.launch.choose_precision` (recorded
    in config.json and the summary); the trackers of ``run.log_with`` are started (:func:`start_trackers`).

    Raises:
        UsageError: a tracker whose package is missing; a resume in another precision than the run's
            (ResumeConfigError); a ValueError of the task's ``build`` (a setting its parts refuse, such as an unknown
            model name), as one line; and those of :func:`train`.
    """
    run_steps(task, config)
    run_cfg, optim = config.run, config.optim
    output_dir = Path(output_dir)
    check_trackers_installed(run_cfg.log_with)
    if run_cfg.log_with:
        check_tracker_folders(output_dir)
    saved = saved_run_config(output_dir) if resume else {}
    precision, precision_line = choose_precision(
        run_cfg.mixed_precision, recorded_precision(saved) if saved else None, os.environ.get(PRECISION_ENV)
    )
    accelerator = build_accelerator(
        precision, task.find_unused_parameters, log_with=run_cfg.log_with, output_dir=output_dir,
        dist_timeout=run_cfg.dist_timeout,
    )  # fmt: skip
    if precision_line:
        accelerator.print(precision_line, flush=True)
    world, accum = accelerator.num_processes, optim.grad_accum
    if optim.batch_size % (world * accum):
        raise UsageError(
            f"batch_size ({optim.batch_size}) must be divisible by processes x grad_accum ({world} x {accum}): "
            "change batch_size, grad_accum or the number of processes."
        )
    checkpoint = check_run_dir(output_dir, resume)
    extra = {**task.config_extra(), THREADS_KEY: torch.get_num_threads()}
    changes: dict[str, tuple[Any, Any]] = {}
    if resume:
        if accelerator.is_main_process and saved and not (output_dir / CONFIG_FILE).is_file():
            write_json(output_dir / CONFIG_FILE, saved, indent=2)
            print(f"{output_dir / CONFIG_FILE} was missing: restored from the copy in {checkpoint}", flush=True)
        accelerator.wait_for_everyone()
        if not (output_dir / CONFIG_FILE).is_file():
            raise ResumeConfigError(
                f"--resume: {output_dir / CONFIG_FILE} is missing, and a resumed run checks its settings against it "
                "(checkpoints of earlier versions keep no copy of it); restore the file, or train a new run in "
                "another --output-dir."
            )
        changes = check_resume_config(output_dir, config, task.resumable, trusted_modules=trusted_modules, **extra)
    set_seed(run_cfg.seed)
    try:
        parts = task.build(accelerator)
    except UsageError:
        raise
    except ValueError as err:  # a setting the parts refuse: an unknown model, optimizer or schedule name, ...
        raise UsageError(f"the run cannot be built from its settings: {err}") from err
    if accelerator.is_main_process:  # the data are checked: the folder becomes this run's
        clean_partial_checkpoints(output_dir)
        if checkpoint is None:
            ids = {PRECISION_KEY: accelerator.mixed_precision, TRACKER_ID_KEY: uuid.uuid4().hex}
            save_config(config, output_dir, name, **extra, **ids)
    model, optimizer = accelerator.prepare(parts.model, parts.optimizer)
    unwrapped = accelerator.unwrap_model(model)
    has_deq = any(isinstance(m, DEQ) for m in unwrapped.modules())
    run = Run(task, config, output_dir, accelerator, model, unwrapped, optimizer, parts.scheduler, TrainState(),
              MetricsLog(output_dir / "metrics.jsonl"), name=name, has_deq=has_deq, progress=progress,
              liveness=liveness_group(run_cfg.dist_timeout))  # fmt: skip
    run.summary[PRECISION_KEY] = accelerator.mixed_precision
    if checkpoint is not None:
        extra_state = load_training_checkpoint(
            checkpoint, run.state, run.objects(), rank=accelerator.process_index, processes=accelerator.num_processes,
            read_weights=lambda path: load_weights(run.unwrapped, path),  # read on the CPU, copied into the parameters
            per_process=list(task.process_state()),
        )  # fmt: skip
        task.load_process_state(extra_state, accelerator.device)
        accelerator.print(f"resumed from {checkpoint} at step {run.state.step}")
    if run.is_main:
        if checkpoint is not None:
            if run.log.resume_at(run.state.metrics_lines, run.state.metrics_digest):
                print(f"{run.log.path}: dropped a half-written last line (the run was killed while writing it)")
            record_resume(output_dir, run.state.step, changes)
            if THREADS_KEY in changes:
                print(threads_line(*changes[THREADS_KEY]), flush=True)
        else:
            run.log.start()
        run.config_file = read_json(output_dir / CONFIG_FILE)
        start_trackers(run)
    accelerator.wait_for_everyone()
    return run


def start_trackers(run: Run) -> None:
    """Start the trackers of ``run.log_with`` on the main process (project ``run.project``, else the run's name) with
    the config as hyperparameters (flat dotted keys, plus the precision used and the number of processes), continuing a
    resumed run from its step (:func:`~deq_core.train.trackers.tracker_init_kwargs`)."""
    cfg, acc = run.config.run, run.accelerator
    if not cfg.log_with or not run.is_main:
        return
    saved = read_json(run.output_dir / CONFIG_FILE)
    config = hyperparameters(run.config, mixed_precision=acc.mixed_precision, num_processes=acc.num_processes)
    names = tuple(dict.fromkeys(cfg.log_with))
    kwargs = tracker_init_kwargs(names, run.output_dir, run.state.step + 1, saved.get(TRACKER_ID_KEY))
    acc.init_trackers(cfg.project or run.name, config=config, init_kwargs=kwargs)


def log_record(run: Run, record: dict[str, Any]) -> None:
    """Write a metrics record (main process): a line of metrics.jsonl, and its numbers to the trackers at its step
    (``{split}/{key}``, :func:`~deq_core.train.trackers.tracker_values`)."""
    run.log.write(record)
    if run.accelerator.trackers:
        run.accelerator.log(tracker_values(record), step=int(record["step"]))


def threads_line(saved: Any, current: int) -> str:
    """The console line of a resume with ``current`` torch threads where the run recorded ``saved`` (None: a run
    written before the count was recorded)."""
    if saved is None:
        return (
            f"resuming with {current} torch thread(s); the run did not record the count it ran with, so the result may "
            "not be bit-identical to an uninterrupted run (recorded in config.json under 'resumed')"
        )
    return (
        f"resuming with {current} torch thread(s) where the run used {saved}: bit-identical resumption is lost (the "
        f"rounding differs; recorded in config.json under 'resumed'); resume with {saved} thread(s) to keep it"
    )


def train_step(run: Run, batches: Iterator[Any]) -> StepStats:
    """One optimizer step (``run.state.step`` is its 0-based index): this process's batch in ``optim.grad_accum``
    micro-batches, each forward with the step's Plan set on every DEQ layer of the model (:func:`deq_core.use_plan`),
    gradients synchronized on the last, the Jacobian term added when scheduled, clipped, optimizer and LR-schedule
    steps, then :meth:`Task.after_step`."""
    acc, state, optim = run.accelerator, run.state, run.config.optim
    schedule = schedule_at(run.config, state.step, run.has_deq)
    stats = StepStats(schedule.mode, run.optimizer.param_groups[0]["lr"], schedule.jacobian)
    parts = micro_batches(send_to_device(next(batches), acc.device), optim.grad_accum)
    for i, micro in enumerate(parts):
        last = i == len(parts) - 1
        with contextlib.nullcontext() if last else acc.no_sync(run.model):
            with acc.autocast(), use_plan(run.unwrapped, schedule.deq):
                out = run.task.forward(run.model, micro, replace(schedule, micro=i))
            total = out.loss
            if schedule.jacobian and out.info is not None and out.info.jacobian_loss is not None:
                total = total + schedule.jacobian_weight * out.info.jacobian_loss
            acc.backward(total / optim.grad_accum)
        stats.add(out)
    loss = stats.means()["loss"]
    if not math.isfinite(loss):
        raise FloatingPointError(f"training loss is {loss} at step {state.step + 1}; stopping.")
    if run.config.run.save_grads_at == state.step + 1 and run.is_main:
        save_gradients(run.unwrapped, run.output_dir / f"grads_step{state.step + 1}.safetensors")
    if optim.grad_clip > 0:
        acc.clip_grad_norm_(run.model.parameters(), optim.grad_clip)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    step_scheduler(run.scheduler, state.step)
    run.task.after_step(run.unwrapped, state.step)
    return stats


def step_scheduler(scheduler: Any, steps_done: int) -> None:
    """Advance the LR schedule after an optimizer step: a torch ``LRScheduler`` by one step, a timm scheduler to
    ``steps_done`` (one scheduler "epoch" per optimizer step)."""
    if isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        scheduler.step()
    else:
        scheduler.step(steps_done)


def save_gradients(model: nn.Module, path: Path) -> None:
    """Write every parameter's (synchronized) gradient to a safetensors file, keyed by parameter name (aside and
    renamed: :func:`~deq_core.train.files.write_file`)."""
    grads = {
        name: p.grad.detach().float().contiguous().cpu() for name, p in model.named_parameters() if p.grad is not None
    }
    write_file(path, lambda tmp: save_file(grads, str(tmp)))


def train_record(run: Run, stats: StepStats, seconds: float, steps: int) -> dict[str, Any]:
    """The metrics.jsonl record of the last step, averaged over processes; throughput over the last ``steps``."""
    means = stats.means()
    keys = sorted(means)
    values = torch.tensor([means[k] for k in keys], dtype=torch.float64, device=run.accelerator.device)
    means = dict(zip(keys, run.accelerator.reduce(values, "mean").tolist(), strict=True))
    record: dict[str, Any] = {"step": run.state.step, "split": "train", "loss": means.pop("loss"), **means}
    record.update(lr=stats.lr, mode=stats.mode, jacobian_active=stats.jacobian)
    if run.task.throughput is not None:
        unit, per_step = run.task.throughput
        record[f"{unit}_per_s"] = steps * per_step / max(seconds, 1e-9)
    return record


def evaluate(run: Run, split: str, log: bool = True) -> dict[str, float]:
    """The task's results on ``split`` (every process; the model in eval mode, no gradients), logged by the main
    process (with ``log``) and kept in the summary as ``{split}_{key}``."""
    was_training = run.unwrapped.training
    run.unwrapped.eval()
    try:
        with torch.no_grad():
            result = run.task.evaluate(run.unwrapped, split, run.accelerator)
    finally:
        run.unwrapped.train(was_training)
    if run.is_main and log:
        log_record(run, {"step": run.state.step, "split": split, **result})
    run.summary.update({f"{split}_{k}": v for k, v in result.items()})
    return result


def save_checkpoint(run: Run) -> None:
    """Checkpoint the run at its step (every process calls it), with a copy of config.json; keep the newest
    ``run.keep_checkpoints``."""
    acc = run.accelerator
    run.state.metrics_lines, run.state.metrics_digest = run.log.mark() if run.is_main else (0, "")
    metadata = run.task.weights_metadata() or None
    model = run.unwrapped
    save_training_checkpoint(
        run.output_dir, run.state, run.objects(), rank=acc.process_index, processes=acc.num_processes,
        barrier=acc.wait_for_everyone, write_weights=lambda path: save_model(model, str(path), metadata=metadata),
        per_process=run.task.process_state(), config=run.config_file if run.is_main else None,
    )  # fmt: skip
    if run.is_main:
        prune_checkpoints(run.output_dir, run.config.run.keep_checkpoints)
    acc.wait_for_everyone()


def final_line(run: Run, split: str) -> str:
    """The last console line: train loss, the final split's loss and metric, NFE per step, the chance level and the
    output folder."""
    s, metric = run.summary, run.task.metric
    line = f"final (step {run.state.step}): train loss {s.get('train_loss', float('nan')):.4g}"
    line += f", {split} loss {s[f'{split}_loss']:.4g}, {split} {metric} {s[f'{split}_{metric}']:.4f}"
    if "train_nfe_forward" in s:
        line += f", train NFE forward {s['train_nfe_forward']:.1f}"
        if "train_nfe_backward" in s:
            line += f" / backward {s['train_nfe_backward']:.1f}"
    if f"{split}_nfe_forward" in s:
        line += f", {split} NFE {s[f'{split}_nfe_forward']:.1f}"
    return line + f"; chance level: {run.task.baseline()}; outputs in {run.output_dir}"


def unconverged_line(records: list[dict[str, Any]]) -> str | None:
    """One line summing up the solves that stopped above their tol during training (the ``unconverged`` and
    ``unconverged_backward`` fractions of the train records of metrics.jsonl), or None when every solve converged."""
    train = [r for r in records if r.get("split") == "train"]
    parts = []
    for key, what in (("unconverged", "forward"), ("unconverged_backward", "backward")):
        values = [float(r[key]) for r in train if key in r]
        hit = sum(v > 0 for v in values)
        if hit:
            parts.append(f"{what} in {hit} of {len(values)} logged steps ({max(values):.0%} of the samples at most)")
    if not parts:
        return None
    return (
        "unconverged solves during training: " + "; ".join(parts) + " (metrics.jsonl: unconverged, "
        "unconverged_backward); raise deq.max_iter or deq.tol, or regularize the Jacobian, if this persists"
    )


def progress_postfix(record: dict[str, Any], metric: str) -> dict[str, str]:
    """What the progress bar shows: loss, metric, forward/backward NFE."""
    postfix = {"loss": f"{record['loss']:.4g}"}
    if metric in record:
        postfix[metric] = f"{record[metric]:.3f}"
    if "nfe_forward" in record:
        postfix["nfe"] = f"{record['nfe_forward']:.0f}/{record.get('nfe_backward', 0):.0f}"
    return postfix


def train(
    task: Task,
    config: Any,
    output_dir: str | Path,
    resume: bool = False,
    trusted_modules: Collection[str] = (),
    name: str = "custom",
    progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) training of ``task`` in ``output_dir``, locked for the run; return the summary (step,
    parameters, train loss and NFE of the last logged step, ``{split}_{key}`` of the last evaluations, seconds spent
    in training steps this session, "results" of :meth:`Task.finish`), also written to OUTPUT_DIR/summary.json.

    ``config``: the task's config, a dataclass with the sections ``run`` (:class:`~deq_core.train.sections.RunConfig`),
    ``optim`` (:class:`~deq_core.train.sections.OptimConfig`) and ``deq``
    (:class:`~deq_core.train.deq_config.DEQConfig`, read when the model has DEQ layers), saved in
    OUTPUT_DIR/config.json and compared on resume (its fields in ``task.resumable`` may change). ``name``: the run's
    name (the preset), on the console and in config.json. ``progress``: draw a progress bar (on the main process,
    when stderr is a terminal). ``trusted_modules``: the modules whose solvers the saved config.json may name by
    import path (``resume``).

    Raises:
        RunDirError: the folder is locked by another run, holds a run (without ``resume``) or nothing to resume.
        ResumeConfigError: ``resume`` with a config that changes what is computed.
        UntrustedImportError: ``resume`` and the saved config names a solver of a module not in ``trusted_modules``.
        CheckpointError: the checkpoint to resume holds something else than tensors and plain data.
        UsageError: a tracker of ``run.log_with`` whose package is not installed; a launcher that asked for FSDP or
            DeepSpeed (:func:`~deq_core.train.launch.refuse_sharded_modes`: the run would not be checkpointed whole).
        ProcessTimeoutError: a collective operation of several processes timed out (``run.dist_timeout``); the
            message, also printed, names the ranks that did not answer.
        ProcessLostError: another process died during a collective operation; the message, also printed, says so.
        TrainingDivergedError: (a UsageError and FloatingPointError) the loss or a solve gave NaN or inf; the last
            complete checkpoint is kept.

    The trackers are ended (``accelerator.end_training()``) when training ends, and also when it fails.
    """
    refuse_sharded_modes(os.environ)  # before the folder is locked (or made) and before Accelerate starts
    is_main = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0
    with RunLock(output_dir) if is_main else contextlib.nullcontext():
        run = setup_run(task, config, Path(output_dir), resume, trusted_modules, name, progress)
        try:
            with warnings.catch_warnings():  # counted in metrics.jsonl and summed up once at the end instead
                warnings.filterwarnings("ignore", message=UNCONVERGED_WARNING, category=RuntimeWarning)
                summary = _loop(run)
        except BaseException as error:
            stop = _end_after_failure(run, error)
            if isinstance(error, FloatingPointError):
                raise TrainingDivergedError(diverged_line(run, error)) from error
            if stop is None:
                raise
            raise stop from error
        run.accelerator.end_training()
        return summary


class TrainingDivergedError(UsageError, FloatingPointError):
    """Training produced NaN or inf (the loss, or a DEQ solve that found no finite iterate): one line saying at which
    step, why, and which settings to change (:func:`diverged_line`)."""


def diverged_line(run: Run, error: BaseException) -> str:
    """The line of a run that diverged with ``error`` (a FloatingPointError) in step ``run.state.step + 1``."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if len(reason) > 200:
        reason = reason[:200] + " ..."
    return (
        f"training diverged at step {run.state.step + 1} ({reason}); the run stops: train again, in another "
        f"--output-dir, with a lower optim.lr (it is {run.config.optim.lr:g}) or with gradient clipping "
        "(optim.grad_clip)."
    )


def _end_after_failure(run: Run, error: BaseException) -> ProcessTimeoutError | ProcessLostError | None:
    """End the trackers of a failed run. After a collective that timed out or lost another process, print (stderr)
    the line naming the ranks that did not answer, or the one that died, and return it as the error to raise."""
    stop: ProcessTimeoutError | ProcessLostError | None = None
    if run.liveness is not None and is_collective_timeout(error):
        stop = ProcessTimeoutError(unanswered_line(run.liveness, run.config.run.dist_timeout))
    elif is_peer_lost(error):  # at once: the launcher stops the processes that are left
        stop = ProcessLostError(lost_line())
    if stop is not None:
        print(stop, file=sys.stderr, flush=True)
    try:
        run.accelerator.end_training()
    except Exception as err:  # ending the trackers must not hide why the run failed
        print(f"WARNING: ending the trackers failed: {err}", file=sys.stderr, flush=True)
    return stop


def _announce(run: Run) -> None:
    """The first console lines: what is trained, on what, by how many processes; data warnings."""
    acc = run.accelerator
    run.summary["parameters"] = sum(p.numel() for p in run.unwrapped.parameters() if p.requires_grad)
    acc.print(
        f"{run.name}: {run.summary['parameters']} parameters, {run.task.describe()}, {acc.num_processes} "
        f"process(es), {run.steps} steps"
    )
    if run.has_deq and run.state.step < run.config.deq.pretrain_steps:
        deq = run.config.deq
        acc.print(f"unrolled pretraining (depth {deq.pretrain_depth}) for {deq.pretrain_steps} steps, then solving")
    for warning in run.task.warnings() if run.is_main else []:
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)


def _loop(run: Run) -> dict[str, Any]:
    state, steps, cfg = run.state, run.steps, run.config.run
    _announce(run)
    bar = tqdm(total=steps, initial=state.step, disable=not (run.progress and progress_enabled(run.is_main)),
               desc=run.name, dynamic_ncols=True)  # fmt: skip
    say = bar.write if run.is_main else (lambda text: None)
    batches = run.task.train_batches(state.step, run.accelerator)
    window = [0.0, 0]  # training-step seconds and steps since the last metrics line
    seconds = 0.0
    run.model.train()
    while state.step < steps:
        started = time.perf_counter()
        stats = train_step(run, batches)
        elapsed = time.perf_counter() - started
        seconds, window = seconds + elapsed, [window[0] + elapsed, window[1] + 1]
        bar.update(1)
        if state.step % cfg.log_every == 0 or state.step == steps:
            _log_train(run, train_record(run, stats, window[0], window[1]), bar)
            window = [0.0, 0]
        if run.has_deq and state.step == run.config.deq.pretrain_steps < steps:
            say(f"step {state.step}: unrolled pretraining done; the DEQ now solves for its equilibrium")
        if state.step % run.eval_every == 0 or state.step == steps:
            for split in run.task.eval_splits:
                result = evaluate(run, split)
                line = f"step {state.step}: {split} " + ", ".join(f"{k} {v:.4g}" for k, v in result.items())
                if run.has_deq and state.step < run.config.deq.pretrain_steps:
                    line += " (evaluated by solving for the equilibrium; training is still unrolled)"
                say(line)
        stop = 0 < cfg.stop_after <= state.step < steps
        if (cfg.save_every > 0 and state.step % cfg.save_every == 0) or stop or state.step == steps:
            save_checkpoint(run)
        if stop:
            run.accelerator.print(
                f"stopping after step {state.step} (stop_after={cfg.stop_after}); resume with --resume"
            )
            break
    bar.close()
    run.summary.update(step=state.step, train_seconds_this_session=seconds)
    if state.step == steps:
        _finish(run)
    run.accelerator.wait_for_everyone()
    return run.summary


def _log_train(run: Run, record: dict[str, Any], bar: Any) -> None:
    """Write the train record (main process; none when ``bar`` is None) and keep its loss and NFE in the summary."""
    if run.is_main and bar is not None:
        log_record(run, record)
        bar.set_postfix(progress_postfix(record, run.task.metric))
    run.summary["train_loss"] = record["loss"]
    run.summary.update({f"train_{k}": record[k] for k in ("nfe_forward", "nfe_backward") if k in record})


def _finish(run: Run) -> None:
    """End of training: the final evaluations, then (main process) summary.json, the plot, the task's outputs and
    the final line."""
    for split in run.task.final_splits:
        evaluate(run, split)
    for split in run.task.eval_splits:  # resumed from the last checkpoint: nothing was evaluated in this session
        if f"{split}_loss" not in run.summary:
            evaluate(run, split, log=False)
    if not run.is_main:
        return
    if "train_loss" not in run.summary:
        _log_train(run, [r for r in run.log.read() if r.get("split") == "train"][-1], None)
    split = run.task.final_splits[-1] if run.task.final_splits else run.task.eval_splits[0]
    plot_training(run.log.path, run.output_dir / "training.png", run.task.metric)
    results = run.task.finish(run.output_dir, run.log.read())
    if results:
        run.summary["results"] = results
    write_json(run.output_dir / "summary.json", run.summary)
    print(final_line(run, split), flush=True)
    unconverged = unconverged_line(run.log.read())
    if unconverged is not None:
        print(unconverged, flush=True)
