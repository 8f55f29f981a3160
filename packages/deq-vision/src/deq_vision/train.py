"""Train an image classifier: ``python -m deq_vision.train --config NAME [--data-dir DIR] [--output-dir DIR]
[--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (many GPUs, or several CPU processes with
``accelerate launch --multi_gpu --num_processes 2 -m deq_vision.train ...``). Without arguments it runs the CPU-scale
main job: the MDEQ on scikit-learn's digits (config ``digits-mdeq``).

timm supplies the transforms, Mixup/CutMix, optimizer, LR schedule, accuracy and model EMA; deq_core supplies the DEQ
layer, the pretraining switch, the Jacobian-regularization schedule and the metrics file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from safetensors.torch import load_model, save_model
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3, accuracy
from torch import Tensor, nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from deq_core.train.checkpoints import clean_partial_checkpoints, prune_checkpoints
from deq_core.train.errors import UsageError
from deq_core.train.metrics import MetricsLog
from deq_core.train.overrides import apply_overrides
from deq_core.train.progress import progress_enabled
from deq_core.train.run_config import check_resume_config, record_resume, save_config
from deq_core.train.rundir import RunLock, check_run_dir
from deq_core.train.schedules import JacobianSchedule, PretrainSchedule, jittered_max_iter
from deq_core.train.state import TrainState, load_training_checkpoint, save_training_checkpoint

from .configs import PRESETS, Config, get_config
from .data import DatasetError, build_datasets, resolve_num_classes
from .data.seeded import SeededItems
from .models import count_parameters, create_model
from .plots import plot_training

MAIN_JOB = "digits-mdeq"
# Settings that may change when a run is resumed (they do not change what is computed).
RESUMABLE_CHANGES = frozenset(
    {"stop_after", "eval_every", "log_every", "save_every", "keep_checkpoints", "num_workers", "eval_limit"}
)


@dataclass
class StepStats:
    """Statistics of one optimizer step, averaged over its micro-batches (this process)."""

    loss: list[float] = field(default_factory=list)
    acc: list[float] = field(default_factory=list)
    nfe_forward: list[float] = field(default_factory=list)
    nfe_backward: list[float] = field(default_factory=list)
    residual: list[float] = field(default_factory=list)
    residual_backward: list[float] = field(default_factory=list)
    jacobian_loss: list[float] = field(default_factory=list)

    def means(self) -> dict[str, float]:
        return {k: sum(v) / len(v) for k, v in vars(self).items() if v}


def build_accelerator(cfg: Config) -> Accelerator:
    """An Accelerator that joins the processes of ``accelerate launch`` / ``torchrun``, also on CPU (where a plain
    ``Accelerator()`` would let each process train alone), with a seedable sampler so that a resumed run sees the
    same batches."""
    return Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision=cfg.mixed_precision,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )


def build_model(cfg: Config) -> nn.Module:
    """The config's model (an MDEQ with the config's DEQ settings, or a timm network)."""
    settings: dict[str, Any] = cfg.deq_settings() if cfg.is_deq else {}
    return create_model(cfg.model, cfg.head_classes, cfg.in_chans, drop_rate=cfg.drop_rate, **settings)


def micro_batches(x: Tensor, y: Tensor, n: int) -> list[tuple[Tensor, Tensor]]:
    """Split a batch (x (B, ...), y (B,)) into ``n`` equal micro-batches."""
    if x.shape[0] % n:
        raise ValueError(f"{x.shape[0]} images per process cannot be split into {n} micro-batches (grad_accum).")
    return list(zip(x.chunk(n), y.chunk(n)))


@torch.no_grad()
def evaluate_loader(
    model: nn.Module, loader: DataLoader, device: torch.device, max_iter: int | None = None
) -> dict[str, float]:
    """Sums over a loader, for one process: {"count", "loss", "acc", "acc5", "nfe_forward", "residual"} (loss and
    accuracies summed over images, in nats and percent; NFE and residual summed per image). Divide by "count" for
    means (see :func:`finish_eval`). Runs in eval mode (the DEQ's eval limits, or ``max_iter`` as a hard stop) and
    restores the model's training mode."""
    was_training = model.training
    model.eval()
    is_deq = hasattr(model, "deq")
    topk = (1, 5) if getattr(model, "num_classes", 10) >= 5 else (1, 1)
    totals = dict.fromkeys(("count", "loss", "acc", "acc5", "nfe_forward", "residual"), 0.0)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        if is_deq:
            logits, info = model(x, max_iter=max_iter, return_info=True)
            totals["nfe_forward"] += info.nfe * x.shape[0]
            totals["residual"] += float(info.residual.float().sum())
        else:
            logits = model(x)
        top1, top5 = accuracy(logits, y, topk=topk)
        n = x.shape[0]
        totals["count"] += n
        totals["loss"] += float(nn.functional.cross_entropy(logits, y)) * n
        totals["acc"] += float(top1) * n
        totals["acc5"] += float(top5) * n
    model.train(was_training)
    if not is_deq:
        del totals["nfe_forward"], totals["residual"]
    return totals


def finish_eval(totals: dict[str, float]) -> dict[str, float]:
    """Means from the sums of :func:`evaluate_loader` (possibly summed over processes)."""
    count = max(totals["count"], 1.0)
    return {k: v / count for k, v in totals.items() if k != "count"}


def distributed_eval(
    accelerator: Accelerator, model: nn.Module, loader: DataLoader, max_iter: int | None = None
) -> dict[str, float]:
    """Evaluate on every process's shard and sum over processes; returns the means."""
    totals = evaluate_loader(model, loader, accelerator.device, max_iter)
    keys = sorted(totals)
    summed = accelerator.reduce(torch.tensor([totals[k] for k in keys], device=accelerator.device), "sum")
    return finish_eval(dict(zip(keys, summed.tolist())))


def batches_from(loader: Any, accelerator: Accelerator, step: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless training batches, starting where step ``step`` left off: epoch ``step // len(loader)`` (reshuffled per
    epoch by the seedable sampler), skipping the batches already taken in it."""
    per_epoch = len(loader)
    if per_epoch == 0:
        raise DatasetError("the training set is smaller than one batch: lower batch_size or add images.")
    epoch, offset = divmod(step, per_epoch)
    while True:
        loader.set_epoch(epoch)
        yield from accelerator.skip_first_batches(loader, offset) if offset else loader
        epoch, offset = epoch + 1, 0


def checkpoint_objects(accelerator: Accelerator, optimizer: Any, scheduler: Any, ema: Any) -> dict[str, Any]:
    """What a checkpoint saves besides the weights, the step and the random states (state dicts by file name)."""
    objects = {"optimizer": optimizer, "scheduler": scheduler}
    if ema is not None:
        objects["ema"] = ema
    if accelerator.scaler is not None:
        objects["scaler"] = accelerator.scaler
    return objects


def save_checkpoint(
    output_dir: Path, accelerator: Accelerator, raw: nn.Module, objects: dict[str, Any], state: TrainState, keep: int
) -> None:
    """Checkpoint ``state.step`` (model.safetensors, state dicts, step, random states; every process calls it),
    written aside and renamed when complete; keep the newest ``keep``."""
    save_training_checkpoint(
        output_dir, state, objects, rank=accelerator.process_index, processes=accelerator.num_processes,
        barrier=accelerator.wait_for_everyone, write_weights=lambda path: save_model(raw, str(path)),
    )  # fmt: skip
    if accelerator.is_main_process:
        prune_checkpoints(output_dir, keep)
    accelerator.wait_for_everyone()


def train(
    cfg: Config,
    output_dir: Path,
    name: str = "custom",
    resume: bool = False,
    data_dir: Path | None = None,
    download: bool = False,
) -> dict[str, Any]:
    """Run (or resume) training in ``output_dir``, locked for the run; return the final summary (step, train loss,
    eval loss/accuracy, NFE, seconds spent in training steps in this session), also written to
    OUTPUT_DIR/summary.json.

    Raises:
        RunDirError: the folder is locked by another run, holds a run (without ``resume``) or nothing to resume.
        CheckpointError: the checkpoint to resume holds something else than tensors and plain data.
    """
    main = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0
    with RunLock(output_dir) if main else contextlib.nullcontext():
        return _train(cfg, Path(output_dir), name, resume, data_dir, download)


def _train(
    cfg: Config, output_dir: Path, name: str, resume: bool, data_dir: Path | None, download: bool
) -> dict[str, Any]:
    cfg = resolve_num_classes(cfg, data_dir)  # dataset=folder: the head from DATA_DIR/train; checked before any file
    accelerator = build_accelerator(cfg)
    main = accelerator.is_main_process
    world = accelerator.num_processes
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(
            f"batch_size ({cfg.batch_size}) must be divisible by processes x grad_accum ({world} x {cfg.grad_accum})."
        )
    found = check_run_dir(output_dir, resume)
    where = None if data_dir is None else str(data_dir)
    changes = check_resume_config(output_dir, cfg, RESUMABLE_CHANGES, data_dir=where) if resume else {}

    set_seed(cfg.seed)
    with accelerator.main_process_first():
        train_set, eval_set = build_datasets(cfg, data_dir, download=download and main)
    train_set = SeededItems(train_set, cfg.seed)  # augmentation drawn per (seed, epoch, image): exact on resume
    if main:  # the data are checked: the folder becomes this run's
        clean_partial_checkpoints(output_dir)
        if found is None:
            save_config(cfg, output_dir, name, data_dir=where)
    per_process = cfg.batch_size // world
    # Its own generator: creating an iterator then draws no number from the global RNG, so a resumed run draws the
    # same dropout masks and Hutchinson probes as an uninterrupted one.
    train_loader = DataLoader(
        train_set, batch_size=per_process, shuffle=True, drop_last=True, num_workers=cfg.num_workers,
        generator=torch.Generator().manual_seed(cfg.seed),
    )  # fmt: skip
    eval_loader = DataLoader(eval_set, batch_size=max(per_process, 64), num_workers=cfg.num_workers)
    model = build_model(cfg)
    ema = ModelEmaV3(model, decay=cfg.ema_decay) if cfg.ema_decay > 0 else None
    optimizer = create_optimizer_v2(model, opt=cfg.opt, lr=cfg.lr, weight_decay=cfg.weight_decay, momentum=cfg.momentum)
    # One scheduler "epoch" is one optimizer step: the LR is a function of the step count, exact on resume.
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=cfg.sched, num_epochs=cfg.steps, warmup_epochs=cfg.warmup_steps, warmup_lr=cfg.warmup_lr,
        min_lr=cfg.min_lr, decay_epochs=max(cfg.steps // 3, 1),
    )  # fmt: skip
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    if ema is not None:
        ema.to(accelerator.device)
    state = TrainState()
    raw = accelerator.unwrap_model(model)
    objects = checkpoint_objects(accelerator, optimizer, scheduler, ema)
    log = MetricsLog(output_dir / "metrics.jsonl")
    if found is not None:
        load_training_checkpoint(
            found, state, objects, rank=accelerator.process_index, processes=world,
            read_weights=lambda path: load_model(raw, str(path), device=str(accelerator.device)),
        )  # fmt: skip
        accelerator.print(f"resumed from {found} at step {state.step}")
    if main:
        if found is not None:
            record_resume(output_dir, state.step, changes)
            if log.resume_at(state.metrics_lines):
                print(f"{log.path}: dropped a half-written last line (the run was killed while writing it)")
        elif log.path.exists():
            log.path.unlink()
    accelerator.wait_for_everyone()

    n_params = count_parameters(raw)
    accelerator.print(
        f"{name}: {cfg.model}, {n_params} parameters, {cfg.dataset} ({len(train_set)} train / {len(eval_set)} eval "
        f"images at {cfg.image_size}px, {cfg.head_classes} classes), {world} process(es), {cfg.steps} steps of "
        f"{cfg.batch_size} images"
    )
    mixup = None
    if cfg.mixup > 0 or cfg.cutmix > 0:
        mixup = Mixup(
            mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=cfg.label_smoothing,
            num_classes=cfg.head_classes,
        )  # fmt: skip
    criterion: nn.Module = (
        SoftTargetCrossEntropy() if mixup is not None else nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    )
    jacobian = JacobianSchedule(
        cfg.jac_weight, cfg.jac_prob, cfg.jac_growth, cfg.jac_every, seed=cfg.seed, stop=cfg.jac_stop or None
    )
    pretrain = PretrainSchedule(cfg.pretrain_steps, cfg.pretrain_depth)
    bar = tqdm(total=cfg.steps, initial=state.step, disable=not progress_enabled(main), desc=name, dynamic_ncols=True)
    last_time, last_step = time.perf_counter(), state.step
    train_seconds = 0.0
    summary: dict[str, Any] = {"parameters": n_params}
    batches = batches_from(train_loader, accelerator, state.step)
    model.train()

    while state.step < cfg.steps:
        step = state.step  # 0-based index of the step being taken; logged as step + 1
        started = time.perf_counter()
        unroll = pretrain.unroll_at(step) if cfg.is_deq else None
        max_iter = jittered_max_iter(cfg.max_iter, cfg.max_iter_jitter, cfg.seed, step) if cfg.is_deq else None
        use_jac = cfg.is_deq and jacobian.active(step)
        gamma = jacobian.weight_at(step)
        stats = StepStats()
        x_all, y_all = next(batches)
        for i, (x, y) in enumerate(micro_batches(x_all, y_all, cfg.grad_accum)):
            last = i == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if last else accelerator.no_sync(model)
            with sync:
                target: Tensor = y
                if mixup is not None:
                    x, target = mixup(x, y)
                with accelerator.autocast():
                    if cfg.is_deq:
                        logits, info = model(
                            x, max_iter=max_iter, unroll=unroll, jacobian_loss=use_jac, return_info=True
                        )
                    else:
                        logits, info = model(x), None
                    loss = criterion(logits, target)
                total = loss
                if use_jac and info is not None and info.jacobian_loss is not None:
                    total = loss + gamma * info.jacobian_loss
                accelerator.backward(total / cfg.grad_accum)
            stats.loss.append(float(loss.detach()))
            stats.acc.append(float(accuracy(logits.detach(), y, topk=(1,))[0]))
            if info is not None:
                for key, value in info.statistics().items():
                    getattr(stats, key).append(value)
        if not math.isfinite(stats.means()["loss"]):
            raise FloatingPointError(f"training loss is {stats.means()['loss']} at step {step + 1}; stopping.")
        if cfg.grad_clip > 0:
            accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        scheduler.step(state.step)
        if ema is not None:
            ema.update(raw, step=state.step)
        train_seconds += time.perf_counter() - started
        bar.update(1)

        if state.step % cfg.log_every == 0 or state.step == cfg.steps:
            means = stats.means()
            keys = sorted(means)
            reduced = accelerator.reduce(torch.tensor([means[k] for k in keys], device=accelerator.device), "mean")
            means = dict(zip(keys, reduced.tolist()))
            now = time.perf_counter()
            images = (state.step - last_step) * cfg.batch_size
            record: dict[str, Any] = {"step": state.step, "split": "train", "loss": means["loss"], "acc": means["acc"]}
            for key in ("nfe_forward", "nfe_backward", "residual", "residual_backward", "jacobian_loss"):
                if key in means:
                    record[key] = means[key]
            record.update(
                lr=lr,
                images_per_s=images / max(now - last_time, 1e-9),
                mode="unrolled" if unroll else "solve",
                jacobian_active=use_jac,
            )
            last_time, last_step = now, state.step
            if main:
                log.write(record)
                postfix = {"loss": f"{means['loss']:.3g}", "acc": f"{means['acc']:.1f}"}
                if "nfe_forward" in means:
                    postfix["nfe"] = f"{means['nfe_forward']:.0f}/{means.get('nfe_backward', 0):.0f}"
                bar.set_postfix(postfix)
            summary["train_loss"] = means["loss"]
            summary.update({f"train_{k}": means[k] for k in ("nfe_forward", "nfe_backward") if k in means})

        if state.step % cfg.eval_every == 0 or state.step == cfg.steps:
            result = distributed_eval(accelerator, raw, eval_loader)
            if main:
                log.write({"step": state.step, "split": "eval", **result})
                bar.write(f"step {state.step}: eval " + ", ".join(f"{k} {v:.4g}" for k, v in result.items()))
            summary.update({f"eval_{k}": v for k, v in result.items()})
            if ema is not None:
                result = distributed_eval(accelerator, ema.module, eval_loader)
                if main:
                    log.write({"step": state.step, "split": "eval_ema", **result})
                summary.update({f"eval_ema_{k}": v for k, v in result.items()})
            last_time = time.perf_counter()

        interrupted = cfg.stop_after > 0 and state.step >= cfg.stop_after
        periodic = cfg.save_every > 0 and state.step % cfg.save_every == 0
        if periodic or interrupted or state.step == cfg.steps:
            state.metrics_lines = log.line_count() if main else 0
            save_checkpoint(output_dir, accelerator, raw, objects, state, cfg.keep_checkpoints)
            last_time = time.perf_counter()
        if interrupted and state.step < cfg.steps:
            accelerator.print(f"stopping after step {state.step} (stop_after={cfg.stop_after}); resume with --resume")
            bar.close()
            summary["step"] = state.step
            return summary
    bar.close()

    summary.update(step=state.step, train_seconds_this_session=train_seconds)
    if main:
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        plot_training(log.path, output_dir / "training.png")
        line = f"final (step {state.step}): train loss {summary.get('train_loss', float('nan')):.4g}"
        line += f", eval loss {summary.get('eval_loss', float('nan')):.4g}, eval acc {summary.get('eval_acc', 0):.2f}%"
        if "eval_nfe_forward" in summary:
            line += f", eval NFE {summary['eval_nfe_forward']:.1f}"
        if "train_nfe_forward" in summary:
            line += f", train NFE {summary['train_nfe_forward']:.1f} / {summary.get('train_nfe_backward', 0):.1f}"
        print(line)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deq_vision.train",
        description="Train a deq-vision model. Settings: --config NAME, then key=value overrides of its fields.",
    )
    parser.add_argument(
        "--config", default=MAIN_JOB, help=f"preset name (default {MAIN_JOB}); one of: {', '.join(PRESETS)}"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="CIFAR-10: the folder containing cifar-10-batches-py; imagenet / folder: the folder with train/ and val/",
    )  # fmt: skip
    parser.add_argument("--output-dir", type=Path, default=None, help="run directory (default runs/CONFIG)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    parser.add_argument("--download", action="store_true", help="CIFAR-10: download into --data-dir (network)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process (default: torch's choice)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. steps=200 lr=3e-4 jac_weight=1")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = apply_overrides(get_config(args.config), args.overrides)
    except ValueError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    output_dir = args.output_dir or Path("runs") / args.config
    try:
        train(cfg, output_dir, name=args.config, resume=args.resume, data_dir=args.data_dir, download=args.download)
    except UsageError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
