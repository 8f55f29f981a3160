"""Fault injection: a training run killed (SIGKILL) at random moments, including in the middle
of a checkpoint save, and resumed each time, ends with the weights and metrics of an uninterrupted run."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from deq_core.train.checkpoints import latest_complete_checkpoint
from deq_core.train.metrics import read_metrics
from deq_core.train.testing.faults import random_kills, train_with_faults

ARGS = ["--config", "synthetic-tiny", "--no-progress", "deq.jac_weight=2", "save_every=3"]
POINTS_PER_SAVE = 9  # 6 files flushed, the folder flushed, renamed, its parent flushed (checkpoints at 3, 6, ..., 20)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    folder = latest_complete_checkpoint(run)
    assert folder is not None and folder.name == "step_0000020"
    return load_file(str(folder / "model.safetensors"))


def test_killed_and_resumed_runs_end_as_an_uninterrupted_run(tmp_path: Path) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train_with_faults("deq_toy.train", ARGS, full, kills=[]) == [0]
    kills = random_kills(seed=12, n=4, max_lines=2, max_save_point=POINTS_PER_SAVE)
    codes = train_with_faults("deq_toy.train", ARGS, cut, kills)
    # The first kill (inside a save) always lands; a kill at a random moment can miss on a fast machine (the run
    # ends before it), and the attempt that finishes ends the series: at least one kill, the last attempt done.
    assert codes[0] == -9 and set(codes[:-1]) == {-9} and codes[-1] == 0, codes
    a, b = _weights(full), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert read_metrics(cut / "metrics.jsonl") == read_metrics(full / "metrics.jsonl")
    assert (cut / "results.json").read_text() == (full / "results.json").read_text()
    assert not list((cut / "checkpoints").glob("*.partial"))
