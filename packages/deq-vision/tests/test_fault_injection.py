"""Fault injection: a training run with augmentation and Mixup, killed (SIGKILL) at random
moments, including in the middle of a checkpoint save, and resumed each time, ends with the weights and metrics of an
uninterrupted run."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.metrics import read_metrics
from deq_core.train.testing.faults import random_kills, train_with_faults

SETTINGS = ["steps=12", "save_every=2", "eval_every=3", "augment=true", "mixup=0.2", "dropout=0.1"]
POINTS_PER_SAVE = 9  # 6 files (model, optimizer, scheduler, train_state, rng, manifest), folder, rename, parent
TIMING = {"images_per_s"}


def _weights(run: Path) -> dict[str, torch.Tensor]:
    folder = latest_complete_checkpoint(run)
    assert folder is not None and folder.name == "step_0000012"
    return load_file(str(folder / "model.safetensors"))


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run / "metrics.jsonl")]


def test_killed_and_resumed_runs_end_as_an_uninterrupted_run(cifar_dir: Path, tmp_path: Path) -> None:
    args = ["--config", "tiny-mdeq", "--data-dir", str(cifar_dir), *SETTINGS]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train_with_faults("deq_vision.train", args, full, kills=[]) == [0]
    kills = random_kills(seed=12, n=4, max_lines=3, max_save_point=POINTS_PER_SAVE)
    codes = train_with_faults("deq_vision.train", args, cut, kills)
    # The first kill (inside a save) always lands; a kill at a random moment can miss on a fast machine (the run
    # ends before it), and the attempt that finishes ends the series: at least one kill, the last attempt done.
    assert codes[0] == -9 and set(codes[:-1]) == {-9} and codes[-1] == 0, codes
    a, b = _weights(full), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(cut) == _metrics(full)
    assert not list((cut / "checkpoints").glob("*.partial"))
