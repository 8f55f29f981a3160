"""Train a sequence model: ``python -m deq_lm.train --config NAME [--output-dir DIR] [--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (many GPUs, or several CPU processes with
``accelerate launch --multi_gpu --num_processes 2 -m deq_lm.train ...``). Without arguments it runs the main job:
the DEQ-Transformer on copy memory at a CPU-sized horizon (config ``copy-deq-transformer-quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from safetensors.torch import save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from deq_core import DEQInfo
from deq_core.train.checkpoints import clean_partial_checkpoints, prune_checkpoints
from deq_core.train.errors import UsageError
from deq_core.train.metrics import MetricsLog
from deq_core.train.overrides import apply_overrides
from deq_core.train.progress import progress_enabled
from deq_core.train.run_config import check_resume_config, record_resume, save_config
from deq_core.train.rundir import RunLock, check_run_dir
from deq_core.train.schedules import JacobianSchedule, PretrainSchedule, jittered_max_iter

from .checkpoint import TrainState, load_checkpoint, save_checkpoint
from .configs import PRESETS, Config, get_config
from .models import SequenceModel, build_model, count_parameters
from .plots import plot_training
from .schedule import lr_factor
from .tasks import Task, build_task

MAIN_JOB = "copy-deq-transformer-quick"
# Settings that may change when a run is resumed (they do not change what is computed).
RESUMABLE_CHANGES = frozenset(
    {"stop_after", "save_grads_at", "eval_every", "log_every", "save_every", "keep_checkpoints", "n_test", "data_dir",
     "cache_dir"}
)  # fmt: skip


@dataclass
class StepStats:
    """Statistics of one optimizer step, averaged over its micro-batches (this process)."""

    mode: str  # "unrolled" (pretraining) or "solve"
    lr: float
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, loss: Tensor, metric: Tensor, info: DEQInfo | None) -> None:
        """Record one micro-batch: its loss and metric, and the DEQ statistics when the model has some."""
        found: dict[str, float] = {"loss": float(loss.detach()), "metric": float(metric)}
        if info is not None:
            found.update(info.statistics())
        for key, value in found.items():
            self.values.setdefault(key, []).append(value)

    def means(self) -> dict[str, float]:
        return {k: sum(v) / len(v) for k, v in self.values.items()}


def build_accelerator(cfg: Config) -> Accelerator:
    """An Accelerator that joins the processes of ``accelerate launch`` / ``torchrun``, also on CPU (where a plain
    ``Accelerator()`` would let each process train alone)."""
    return Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision)


def micro_batches(tensors: tuple[Tensor, Tensor], n: int) -> list[tuple[Tensor, Tensor]]:
    """Split (inputs, targets) rows into ``n`` equal micro-batches."""
    rows = tensors[0].shape[0]
    if rows % n:
        raise ValueError(f"{rows} rows per process cannot be split into {n} micro-batches (grad_accum).")
    size = rows // n
    return [(tensors[0][i * size : (i + 1) * size], tensors[1][i * size : (i + 1) * size]) for i in range(n)]


def evaluate_split(model: SequenceModel, task: Task, split: str, device: torch.device) -> dict[str, float]:
    """The task's evaluation of ``model`` on a whole split in eval mode (the DEQ's eval limits apply): loss, metric
    and, for DEQs, mean forward NFE and residual. Restores the model's training mode."""
    was_training = model.training
    model.eval()
    try:
        return task.evaluate(model, split, device)
    finally:
        model.train(was_training)


def save_gradients(model: nn.Module, path: Path) -> None:
    """Write every parameter's (synchronized) gradient to a safetensors file, keyed by parameter name."""
    grads = {
        name: p.grad.detach().float().contiguous().cpu() for name, p in model.named_parameters() if p.grad is not None
    }
    save_file(grads, str(path))


@dataclass
class Run:
    """Everything a training run holds, built by :func:`setup_run`."""

    cfg: Config
    name: str
    output_dir: Path
    accelerator: Accelerator
    task: Task
    model: nn.Module  # prepared (e.g. wrapped in DistributedDataParallel)
    raw: SequenceModel  # the unwrapped model
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    state: TrainState
    log: MetricsLog

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process


def setup_run(cfg: Config, output_dir: Path, name: str, resume: bool) -> Run:
    """Build the accelerator, task, model, optimizer and LR schedule; with ``resume``, load the newest complete
    checkpoint of ``output_dir`` (refusing a config that changes what is computed). Call it holding the run's
    :class:`~deq_core.train.rundir.RunLock` (main process)."""
    accelerator = build_accelerator(cfg)
    world = accelerator.num_processes
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(
            f"batch_size ({cfg.batch_size}) must be divisible by processes x grad_accum ({world} x {cfg.grad_accum})."
        )
    found = check_run_dir(output_dir, resume)
    changes = check_resume_config(output_dir, cfg, RESUMABLE_CHANGES) if resume else {}

    set_seed(cfg.seed)
    with accelerator.main_process_first():  # the main process tokenizes a corpus once; the others read its cache
        task = build_task(cfg)
    if accelerator.is_main_process:  # the data are checked: the folder becomes this run's
        clean_partial_checkpoints(output_dir)
        if found is None:
            save_config(cfg, output_dir, name)
    model = build_model(cfg, task.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    )
    prepared, optimizer = accelerator.prepare(model, optimizer)
    state = TrainState()
    run = Run(cfg, name, output_dir, accelerator, task, prepared, accelerator.unwrap_model(prepared), optimizer,
              scheduler, state, MetricsLog(output_dir / "metrics.jsonl"))  # fmt: skip

    if found is not None:
        load_checkpoint(found, accelerator, run.raw, optimizer, scheduler, state)
        accelerator.print(f"resumed from {found} at step {state.step}")
    if run.main:
        if found is not None:
            record_resume(output_dir, state.step, changes)
            if run.log.resume_at(state.metrics_lines):
                print(f"{run.log.path}: dropped a half-written last line (the run was killed while writing it)")
        elif run.log.path.exists():
            run.log.path.unlink()
    accelerator.wait_for_everyone()
    return run


def train_step(run: Run, pretrain: PretrainSchedule, jacobian: JacobianSchedule) -> StepStats:
    """One optimizer step (``run.state.step`` is its 0-based index): this process's slice of the global batch in
    ``grad_accum`` micro-batches, gradients synchronized on the last, clipped, Adam and LR-schedule steps."""
    cfg, acc, state = run.cfg, run.accelerator, run.state
    step = state.step
    unroll = pretrain.unroll_at(step) if cfg.is_deq else None
    max_iter = jittered_max_iter(cfg.max_iter, cfg.max_iter_jitter, cfg.seed, step) if cfg.is_deq else None
    use_jac = cfg.is_deq and jacobian.active(step)
    stats = StepStats(mode="unrolled" if unroll else "solve", lr=run.optimizer.param_groups[0]["lr"])
    batch = run.task.train_batch(step, cfg.batch_size, acc.process_index, acc.num_processes)
    if not run.task.stateful or run.task.starts_stream(step, cfg.batch_size) or state.memory is None:
        state.memory = [None] * cfg.grad_accum  # one state per micro-batch (its own rows)
    for i, (x, y) in enumerate(micro_batches(batch, cfg.grad_accum)):
        sync = contextlib.nullcontext() if i == cfg.grad_accum - 1 else acc.no_sync(run.model)
        with sync:
            y = y.to(acc.device)
            out = run.model(
                x.to(acc.device), state.memory[i], targets=y, unroll=unroll, max_iter=max_iter, jacobian_loss=use_jac
            )
            loss, metric = run.task.loss_and_metric(out, y)
            total = loss
            if use_jac and out.info is not None and out.info.jacobian_loss is not None:
                total = loss + jacobian.weight_at(step) * out.info.jacobian_loss
            acc.backward(total / cfg.grad_accum)
        if run.task.stateful:
            state.memory[i] = out.state
        stats.add(loss, metric, out.info)
    if not math.isfinite(stats.means()["loss"]):
        raise FloatingPointError(f"training loss is {stats.means()['loss']} at step {step + 1}; stopping.")
    if cfg.save_grads_at == step + 1 and run.main:
        save_gradients(run.raw, run.output_dir / f"grads_step{step + 1}.safetensors")
    if cfg.grad_clip > 0:
        acc.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    return stats


def train_record(run: Run, stats: StepStats, seconds: float, steps: int) -> dict[str, Any]:
    """The metrics.jsonl record of the last step, averaged over processes; tokens/s over the last ``steps`` steps."""
    means = stats.means()
    keys = sorted(means)
    reduced = run.accelerator.reduce(torch.tensor([means[k] for k in keys], device=run.accelerator.device), "mean")
    means = dict(zip(keys, reduced.tolist()))
    record: dict[str, Any] = {"step": run.state.step, "split": "train", "loss": means.pop("loss")}
    record[run.task.metric] = means.pop("metric")
    record.update(means)
    tokens = steps * run.cfg.batch_size * run.task.seq_len
    record.update(lr=stats.lr, tokens_per_s=tokens / max(seconds, 1e-9), mode=stats.mode)
    return record


def checkpoint(run: Run) -> None:
    """Save the run's checkpoint (every process); keep the newest few."""
    run.state.metrics_lines = run.log.line_count() if run.main else 0
    save_checkpoint(run.output_dir, run.accelerator, run.raw, run.optimizer, run.scheduler, run.state)
    if run.main:
        prune_checkpoints(run.output_dir, run.cfg.keep_checkpoints)
    run.accelerator.wait_for_everyone()


def final_line(step: int, summary: dict[str, Any], test: dict[str, float], metric: str) -> str:
    """The line printed at the end of a run: final train loss, test loss and metric, NFE per step."""
    line = f"final (step {step}): train loss {summary.get('train_loss', float('nan')):.4g}"
    line += f", test loss {test['loss']:.4g}, test {metric} {test[metric]:.4f}"
    if "train_nfe_forward" in summary:
        line += f", NFE forward {summary['train_nfe_forward']:.1f}"
        if "train_nfe_backward" in summary:
            line += f" / backward {summary['train_nfe_backward']:.1f}"
    return line


def train(cfg: Config, output_dir: Path, name: str = "custom", resume: bool = False) -> dict[str, Any]:
    """Run (or resume) training in ``output_dir``, locked for the run; return the summary (step, last train loss
    and NFE, valid/test loss and metric).

    Raises:
        RunDirError: the folder is locked by another run, holds a run (without ``resume``) or nothing to resume.
        CheckpointError: the checkpoint to resume holds something else than tensors and plain data.
    """
    main = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0
    with RunLock(output_dir) if main else contextlib.nullcontext():
        return _train(cfg, Path(output_dir), name, resume)


def _train(cfg: Config, output_dir: Path, name: str, resume: bool) -> dict[str, Any]:
    run = setup_run(cfg, output_dir, name, resume)
    state, acc = run.state, run.accelerator
    summary: dict[str, Any] = {"parameters": count_parameters(run.raw)}
    acc.print(
        f"{name}: {cfg.model}, {summary['parameters']} parameters, {run.task.describe()}, "
        f"{acc.num_processes} process(es), {cfg.steps} steps of {cfg.batch_size} x {run.task.seq_len} tokens"
    )
    for warning in run.task.data_warnings() if run.main else []:
        print(f"WARNING: {warning}", file=sys.stderr)
    jacobian = JacobianSchedule(
        cfg.jac_weight, cfg.jac_prob, cfg.jac_growth, cfg.jac_every, seed=cfg.seed, stop=cfg.jac_stop or None
    )
    pretrain = PretrainSchedule(cfg.pretrain_steps, cfg.pretrain_depth)
    show = progress_enabled(run.main)
    bar = tqdm(total=cfg.steps, initial=state.step, disable=not show, desc=name, dynamic_ncols=True)
    last_time, last_step = time.perf_counter(), state.step
    run.model.train()

    while state.step < cfg.steps:
        stats = train_step(run, pretrain, jacobian)
        bar.update(1)
        if state.step % cfg.log_every == 0 or state.step == cfg.steps:
            now = time.perf_counter()
            record = train_record(run, stats, now - last_time, state.step - last_step)
            last_time, last_step = now, state.step
            if run.main:
                run.log.write(record)
                bar.set_postfix(progress_postfix(record, run.task.metric))
            summary["train_loss"] = record["loss"]
            summary.update({f"train_{k}": record[k] for k in ("nfe_forward", "nfe_backward") if k in record})

        if state.step % cfg.eval_every == 0 or state.step == cfg.steps:
            if run.main:
                result = evaluate_split(run.raw, run.task, "valid", acc.device)
                run.log.write({"step": state.step, "split": "valid", **result})
                bar.write(f"step {state.step}: valid " + ", ".join(f"{k} {v:.4g}" for k, v in result.items()))
                summary.update({f"valid_{k}": v for k, v in result.items()})
            acc.wait_for_everyone()

        interrupted = 0 < cfg.stop_after <= state.step < cfg.steps
        if (cfg.save_every > 0 and state.step % cfg.save_every == 0) or interrupted or state.step == cfg.steps:
            checkpoint(run)
        if interrupted:
            acc.print(f"stopping after step {state.step} (stop_after={cfg.stop_after}); continue with --resume")
            break
    bar.close()
    summary["step"] = state.step
    if state.step == cfg.steps and run.main:
        result = evaluate_split(run.raw, run.task, "test", acc.device)
        run.log.write({"step": state.step, "split": "test", **result})
        summary.update({f"test_{k}": v for k, v in result.items()})
        plot_training(run.log.path, run.output_dir / "training.png")
        print(final_line(state.step, summary, result, run.task.metric))
    acc.wait_for_everyone()
    return summary


def progress_postfix(record: dict[str, Any], metric: str) -> dict[str, str]:
    """What the progress bar shows: loss, metric, forward/backward NFE."""
    postfix = {"loss": f"{record['loss']:.4g}", metric: f"{record[metric]:.3f}"}
    if "nfe_forward" in record:
        postfix["nfe"] = f"{record['nfe_forward']:.0f}/{record.get('nfe_backward', 0):.0f}"
    return postfix


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deq_lm.train",
        description="Train a deq-lm model. Settings: --config NAME, then key=value overrides of its fields.",
    )
    parser.add_argument(
        "--config", default=MAIN_JOB, help=f"preset name (default {MAIN_JOB}); one of: {', '.join(PRESETS)}"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="language modeling: a directory with train.txt, valid.txt, test.txt (sets data_dir; default: the "
        "corpus from the local Hugging Face cache). Copy memory generates its data.",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer", choices=["word", "sentencepiece"], default=None, help="language modeling: sets tokenizer"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="language modeling: sets vocab_size (SentencePiece pieces)"
    )
    parser.add_argument("--output-dir", type=Path, default=None, help="run directory (default runs/CONFIG)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per process (default: torch's choice); 1 is often "
        "fastest for the small copy-memory models on a busy machine",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. steps=200 lr=3e-4 T=100")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = apply_overrides(get_config(args.config), args.overrides)
        flags = {"data_dir": args.data_dir, "tokenizer": args.tokenizer, "vocab_size": args.vocab_size}
        changes = {key: str(value) if key == "data_dir" else value for key, value in flags.items() if value is not None}
        cfg = dataclasses.replace(cfg, **changes)
    except ValueError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    output_dir = args.output_dir or Path("runs") / args.config
    try:
        train(cfg, output_dir, name=args.config, resume=args.resume)
    except UsageError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
