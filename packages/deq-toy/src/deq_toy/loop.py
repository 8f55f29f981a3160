"""The training loop shared by both tasks: Adam + cosine schedule, logging, evaluation, checkpoint and resume."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from deq_core.train.checkpoints import clean_partial_checkpoints, load_checked
from deq_core.train.errors import UsageError
from deq_core.train.metrics import MetricsLog
from deq_core.train.rundir import RunLock, check_run_dir
from deq_core.train.state import load_training_checkpoint

from .checkpoint import ToyState, save_checkpoint
from .configs import Config, config_from_dict
from .tasks import Task, build_task


def cosine_lambda(total_steps: int):  # noqa: ANN201 - a plain function for LambdaLR
    """Learning-rate factor 0.5 (1 + cos(pi step / total)) for LambdaLR."""
    return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / max(total_steps, 1)))


def _check_resume_config(stored: dict[str, Any], config: Config, path: Path) -> None:
    current = dataclasses.asdict(config)
    stored_config = dataclasses.asdict(config_from_dict(stored))
    differ = sorted(k for k in current if current[k] != stored_config.get(k))
    if differ:
        changes = ", ".join(f"{k}: {stored_config.get(k)!r} -> {current[k]!r}" for k in differ)
        raise UsageError(
            f"--resume: the config differs from the one of the checkpoint {path} ({changes}); "
            "resume with the same config and overrides, or start a new run in another --output-dir."
        )


def run_training(
    config: Config,
    output_dir: str | Path,
    data_dir: str | Path = "data",
    resume: bool = False,
    stop_after: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``config`` and write OUTPUT_DIR/{metrics.jsonl, checkpoints/step_N/, config.json, results.json, *.png},
    holding the folder's lock (:class:`deq_core.train.rundir.RunLock`) for the run.

    Args:
        config: a preset with overrides applied.
        output_dir: the run's folder.
        data_dir: where arithmetic data files are read from (and generated into when missing).
        resume: continue from the newest complete checkpoint of OUTPUT_DIR (same config required).
        stop_after: stop (with a checkpoint) once this many steps are done in all, without the final evaluation;
            a later call with ``resume=True`` continues. None: run to the end.
        progress: show a tqdm progress bar.

    Returns:
        the final results (empty when stopped early by ``stop_after``).

    Raises:
        UsageError: a bad folder (locked, holding a run without ``resume``, nothing to resume: RunDirError), a
            checkpoint that is not tensors and plain data (CheckpointError), another config on resume, or bad data.
    """
    output_dir = Path(output_dir)
    with RunLock(output_dir):
        return _run(config, output_dir, Path(data_dir), resume, stop_after, progress)


def _start(
    output_dir: Path, config: Config, found: Path | None, state: ToyState, objects: dict[str, Any], log: MetricsLog
) -> None:
    """Resume from checkpoint ``found`` (same config required; metrics lines after it dropped), or start a new run
    (the task is built, so the data are checked: config.json and an empty metrics file are written)."""
    clean_partial_checkpoints(output_dir)
    if found is None:
        log.path.write_text("")
        (output_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2) + "\n")
        return
    stored = ToyState({})
    load_checked(found / "train_state.json", lambda path: stored.load_state_dict(json.loads(path.read_text())))
    _check_resume_config(stored.config, config, found)
    load_training_checkpoint(found, state, objects)
    if log.resume_at(state.metrics_lines):
        print(f"{log.path}: dropped a half-written last line (the run was killed while writing it)")


def _run(
    config: Config, output_dir: Path, data_dir: Path, resume: bool, stop_after: int | None, progress: bool
) -> dict[str, Any]:
    found = check_run_dir(output_dir, resume)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    task: Task = build_task(config, data_dir)
    model = task.model
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_lambda(task.total_steps))
    objects = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    log = MetricsLog(output_dir / "metrics.jsonl")
    state = ToyState(dataclasses.asdict(config))
    _start(output_dir, config, found, state, objects, log)

    end = task.total_steps if stop_after is None else min(task.total_steps, stop_after)
    eval_every = getattr(task, "eval_every", config.eval_every)
    sums: dict[str, float] = defaultdict(float, state.sums)
    bar = tqdm(range(state.step, end), initial=state.step, total=task.total_steps, disable=not progress, desc="train")
    model.train()
    for step in bar:
        loss, stats, info = task.train_step(task.batch(step), step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if info is not None and info.nfe_backward is not None:
            stats["nfe_backward"] = float(info.nfe_backward)
        if not math.isfinite(stats["loss"]):
            raise FloatingPointError(
                f"training loss is {stats['loss']} at step {step}; lower lr or add Jacobian regularization."
            )
        if task.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), task.clip)
        optimizer.step()
        scheduler.step()
        for key, value in stats.items():
            sums[key] += value
        state.count += 1
        state.step = done = step + 1
        if done % config.log_every == 0 or done == task.total_steps:
            record = {k: v / state.count for k, v in sums.items()}
            log.write({"step": done, "split": "train", **record, "lr": scheduler.get_last_lr()[0]})
            bar.set_postfix(loss=f"{record['loss']:.4g}")
            sums.clear()
            state.count = 0
        if done % eval_every == 0 or done == task.total_steps:
            log.write({"step": done, "split": "valid", **task.evaluate()})
        if done % config.checkpoint_every == 0 or done == end:
            state.sums, state.metrics_lines = dict(sums), log.line_count()
            save_checkpoint(output_dir, state, objects)
    bar.close()
    if end < task.total_steps:
        return {}
    results = task.finish(output_dir, log.read())
    return results
