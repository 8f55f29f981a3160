"""Train an image classifier: ``python -m deq_vision.train --config NAME [--data-dir DIR] [--output-dir DIR]
[--resume] [key=value ...]``.

The same file runs under ``accelerate launch`` (many GPUs, or several CPU processes with
``accelerate launch --multi_gpu --num_processes 2 -m deq_vision.train ...``). Without arguments it runs the CPU-scale
main job: the MDEQ on scikit-learn's digits (config ``digits-mdeq``).

timm supplies the transforms, Mixup/CutMix, optimizer, LR schedule, accuracy and model EMA (:class:`VisionTask`);
deq-core's training skeleton (:mod:`deq_core.train.trainer`) runs it: processes, the DEQ step, metrics, checkpoints,
resume and the training plot.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3, accuracy
from torch import Tensor, nn
from torch.utils.data import DataLoader

import deq_core
from deq_core.train import Forward, Parts, StepSchedule, Task, apply_overrides, run_training_cli, training_parser
from deq_core.train import train as run_skeleton

from .configs import PRESETS, Config, VisionOptimConfig, get_config
from .data import DatasetError, build_datasets, data_config, resolve_num_classes
from .data.seeded import SeededItems
from .models import create_model, is_deq_model, weights_config
from .models.deq_layer import layer_settings

MAIN_JOB = "digits-mdeq"
# Settings that may change when a run is resumed (they do not change what is computed), by dotted name.
RESUMABLE_CHANGES = frozenset(
    {"run.stop_after", "run.eval_every", "run.log_every", "run.save_every", "run.keep_checkpoints",
     "run.save_grads_at", "data.num_workers", "data.eval_limit"}
)  # fmt: skip


def build_model(cfg: Config) -> nn.Module:
    """The config's model (``model`` section): an MDEQ with the config's DEQ layer (``cfg.deq.layer()``) and block
    dropout, or a timm network; its ``pretrained_cfg`` describes the run's data (:func:`~deq_vision.data.data_config`,
    the classes of its head)."""
    model, data = cfg.model, data_config(cfg)
    if not cfg.is_deq:
        return create_model(model.name, cfg.head_classes, cfg.in_chans, data=data, drop_rate=model.drop_rate)
    dropout: dict[str, Any] = {} if model.dropout is None else {"dropout": model.dropout}  # None: the architecture's
    return create_model(
        model.name, cfg.head_classes, cfg.in_chans, deq=cfg.deq.layer(), data=data, drop_rate=model.drop_rate,
        **dropout,
    )  # fmt: skip


def weights_metadata(cfg: Config) -> dict[str, str]:
    """What a weights file of the run carries in its safetensors header (checkpoints and exports alike;
    :mod:`~deq_vision.models.weights_config`): the architecture, the data (:func:`~deq_vision.data.data_config` and
    the classes of the head) and, for an MDEQ, the DEQ layer the run trained and evaluates with."""
    data = {**data_config(cfg), "num_classes": cfg.head_classes}
    return weights_config.weights_metadata(cfg.model.name, data, layer_settings(cfg.deq) if cfg.is_deq else None)


def build_optimizer(model: nn.Module, optim: VisionOptimConfig) -> torch.optim.Optimizer:
    """timm's optimizer of the ``optim`` section (``optim.opt``, lr, weight decay, momentum) for ``model``."""
    return create_optimizer_v2(
        model, opt=optim.opt, lr=optim.lr, weight_decay=optim.weight_decay, momentum=optim.momentum
    )


@torch.no_grad()
def evaluate_loader(
    model: nn.Module, loader: DataLoader, device: torch.device, max_iter: int | None = None
) -> dict[str, float]:
    """Sums over a loader, for one process: {"count", "loss", "acc", "acc5", "nfe_forward", "residual"} (loss and
    accuracies summed over images, in nats and percent; NFE and residual summed per image). Divide by "count" for
    means (see :func:`finish_eval`). Runs in eval mode (the DEQ's eval limits, or ``max_iter`` as a hard stop, set on
    the layer as a :class:`deq_core.Plan`) and restores the model's training mode."""
    was_training = model.training
    model.eval()
    is_deq = is_deq_model(model)
    topk = (1, 5) if getattr(model, "num_classes", 10) >= 5 else (1, 1)
    totals = dict.fromkeys(("count", "loss", "acc", "acc5", "nfe_forward", "residual"), 0.0)
    plan = None if max_iter is None else deq_core.Plan(max_iter=max_iter)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        if is_deq:
            with deq_core.use_plan(model, plan):
                logits, info = model(x, return_info=True)
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
        raise DatasetError("the training set is smaller than one batch: lower optim.batch_size or add images.")
    epoch, offset = divmod(step, per_epoch)
    while True:
        loader.set_epoch(epoch)
        yield from accelerator.skip_first_batches(loader, offset) if offset else loader
        epoch, offset = epoch + 1, 0


class VisionTask(Task):
    """Image classification for the training skeleton: timm transforms (drawn per (seed, epoch, image)), Mixup /
    CutMix, optimizer, LR schedule, accuracy and model EMA (evaluated as split "eval_ema"). The skeleton reads the
    config's ``run``, ``optim`` and ``deq`` sections itself (``run.eval_every=0``: evaluate at the last step only)."""

    metric = "acc"
    resumable = RESUMABLE_CHANGES

    def __init__(self, cfg: Config, data_dir: Path | None, download: bool) -> None:
        self.cfg, self.data_dir, self.download = cfg, data_dir, download
        data = cfg.data
        self.ema: ModelEmaV3 | None = None
        self.eval_splits = ("eval", "eval_ema") if cfg.optim.ema_decay > 0 else ("eval",)
        self.throughput = ("images", cfg.optim.batch_size)
        self.mixup = None
        if data.mixup > 0 or data.cutmix > 0:
            self.mixup = Mixup(
                mixup_alpha=data.mixup, cutmix_alpha=data.cutmix, label_smoothing=data.label_smoothing,
                num_classes=cfg.head_classes,
            )  # fmt: skip
        self.criterion: nn.Module = (
            SoftTargetCrossEntropy() if self.mixup else nn.CrossEntropyLoss(label_smoothing=data.label_smoothing)
        )

    def build(self, accelerator: Accelerator) -> Parts:
        cfg, world = self.cfg, accelerator.num_processes
        optim, seed, workers = cfg.optim, cfg.run.seed, cfg.data.num_workers
        with accelerator.main_process_first():
            download = self.download and accelerator.is_main_process
            train_set, self.eval_set = build_datasets(cfg, self.data_dir, download=download)
        self.train_set = SeededItems(train_set, seed)  # augmentation drawn per (seed, epoch, image): exact on resume
        per_process = optim.batch_size // world
        # Its own generator: creating an iterator then draws no number from the global RNG, so a resumed run draws
        # the same dropout masks and Hutchinson probes as an uninterrupted one.
        train_loader = DataLoader(
            self.train_set, batch_size=per_process, shuffle=True, drop_last=True, num_workers=workers,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip
        eval_loader = DataLoader(self.eval_set, batch_size=max(per_process, 64), num_workers=workers)
        model = build_model(cfg)
        self.ema = ModelEmaV3(model, decay=optim.ema_decay) if optim.ema_decay > 0 else None
        opt = build_optimizer(model, optim)
        # One scheduler "epoch" is one optimizer step: the LR is a function of the step count, exact on resume.
        scheduler, _ = create_scheduler_v2(
            opt, sched=optim.sched, num_epochs=optim.steps, warmup_epochs=optim.warmup_steps,
            warmup_lr=optim.warmup_lr, min_lr=optim.min_lr, decay_epochs=max(optim.steps // 3, 1),
        )  # fmt: skip
        self.train_loader, self.eval_loader = accelerator.prepare(train_loader, eval_loader)
        if self.ema is not None:
            self.ema.to(accelerator.device)
        return Parts(model, opt, scheduler)

    def train_batches(self, start: int, accelerator: Accelerator) -> Iterator[tuple[Tensor, Tensor]]:
        return batches_from(self.train_loader, accelerator, start)

    def forward(self, model: nn.Module, batch: Any, schedule: StepSchedule) -> Forward:
        x, y = batch
        target: Tensor = y
        if self.mixup is not None:
            x, target = self.mixup(x, y)
        if self.cfg.is_deq:
            logits, info = model(x, return_info=True)
        else:
            logits, info = model(x), None
        loss = self.criterion(logits, target)
        return Forward(loss, {"acc": float(accuracy(logits.detach(), y, topk=(1,))[0])}, info)

    def evaluate(self, model: nn.Module, split: str, accelerator: Accelerator) -> dict[str, float]:
        if split == "eval_ema" and self.ema is not None:
            model = self.ema.module
        return distributed_eval(accelerator, model, self.eval_loader)

    def after_step(self, model: nn.Module, steps_done: int) -> None:
        if self.ema is not None:
            self.ema.update(model, step=steps_done)

    def config_extra(self) -> dict[str, Any]:
        return {"data_dir": None if self.data_dir is None else str(self.data_dir)}

    def weights_metadata(self) -> dict[str, str]:
        return weights_metadata(self.cfg)

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"ema": self.ema} if self.ema is not None else {}

    def describe(self) -> str:
        cfg = self.cfg
        return (
            f"{cfg.model.name}, {cfg.data.dataset} ({len(self.train_set)} train / {len(self.eval_set)} eval images at "
            f"{cfg.data.image_size}px, {cfg.head_classes} classes), batches of {cfg.optim.batch_size} images"
        )

    def baseline(self) -> str:
        return f"acc {100 / self.cfg.head_classes:.3g} % (uniform guess over {self.cfg.head_classes} classes)"


def train(
    cfg: Config,
    output_dir: Path,
    name: str = "custom",
    resume: bool = False,
    data_dir: Path | None = None,
    download: bool = False,
    trusted_modules: Collection[str] = (),
) -> dict[str, Any]:
    """Run (or resume) training in ``output_dir`` on the training skeleton (:func:`deq_core.train.trainer.train`),
    locked for the run; return the final summary (step, train loss, eval loss/accuracy, NFE, seconds spent in
    training steps in this session), also written to OUTPUT_DIR/summary.json. ``trusted_modules``: the modules whose
    solvers the saved config.json may name by import path (``resume``).

    Raises:
        RunDirError: the folder is locked by another run, holds a run (without ``resume``) or nothing to resume.
        CheckpointError: the checkpoint to resume holds something else than tensors and plain data.
        UntrustedImportError: ``resume`` and the saved config names a solver of a module not in ``trusted_modules``.
    """
    cfg = resolve_num_classes(cfg, data_dir)  # dataset=folder: the head from DATA_DIR/train; checked before any file
    task = VisionTask(cfg, data_dir, download)
    return run_skeleton(task, cfg, Path(output_dir), resume=resume, trusted_modules=trusted_modules, name=name)


def build_parser() -> argparse.ArgumentParser:
    parser = training_parser(
        "python -m deq_vision.train", "Train a deq-vision model: --config NAME, then key=value overrides of its "
        "sections' fields (data, model, deq, optim, run).", PRESETS, default=MAIN_JOB,
    )  # fmt: skip
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="CIFAR-10: the folder containing cifar-10-batches-py; imagenet / folder: the folder with train/ and val/",
    )  # fmt: skip
    parser.add_argument("--download", action="store_true", help="CIFAR-10: download into --data-dir (network)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for a user error, printed on one line)."""

    def run(cfg: Config, output_dir: Path, args: argparse.Namespace) -> None:
        train(cfg, output_dir, name=args.config, resume=args.resume, data_dir=args.data_dir, download=args.download,
              trusted_modules=args.trust_solver)  # fmt: skip

    return run_training_cli(
        build_parser(), argv, lambda args: apply_overrides(get_config(args.config), args.overrides), run
    )


if __name__ == "__main__":
    sys.exit(main())
