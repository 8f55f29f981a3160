"""Shared test helpers. The models here are tiny: one thread each avoids oversubscribing the 2-core CI machine
(the distributed test runs two processes at once)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

torch.set_num_threads(1)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", TQDM_DISABLE="1")
    env.pop("ACCELERATE_CONFIG_FILE", None)
    return env


def run_module(module: str, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in a fresh process; returns the completed process (not checked)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=subprocess_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def float64():
    """Run the test in float64 (restores the default dtype afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def strengthen_injection(cell: nn.Module, factor: float = 10.0) -> None:
    """Scale the DEQ-Transformer cell's injection weights (plain weights, as in the reference) by ``factor``.

    With post-LN, f(z) = LN(z + ...) keeps z's direction unless the attention output, driven by the injection,
    dominates: a stronger injection makes f contractive, so that plain iteration and the solvers both reach z*
    to near machine precision (needed to compare them exactly).
    """
    with torch.no_grad():
        cell.inject.weight.mul_(factor)


def write_tiny_corpus(folder: Path, n_train: int = 300, seed: int = 0) -> Path:
    """A corpus with structure a small model can learn: sentences from a tiny grammar."""
    rng = random.Random(seed)

    def sentence() -> str:
        subject = rng.choice(["the cat", "a dog", "the dog", "a cat"])
        verb = rng.choice(["sat", "ran", "slept"])
        place = rng.choice(["on the mat", "under the log", "on a log"])
        return f"{subject} {verb} {place} and then it slept"

    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", 40), ("test", 40)):
        (folder / f"{split}.txt").write_text("\n".join(sentence() for _ in range(n)) + "\n")
    return folder
