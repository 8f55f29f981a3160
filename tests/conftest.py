"""Shared helpers of the repository's own tests (READMEs, docs/, lab/, the committed results, the step profiles): one
torch thread and a fixed seed per test, and fresh Python processes for the command lines they run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_and_seed() -> None:
    """One torch thread (the tests share a 2-core machine) and the same random state at the start of every test."""
    torch.set_num_threads(1)
    torch.manual_seed(1234)


def subprocess_env() -> dict[str, str]:
    """The environment of a fresh process: one thread, no warnings, no progress bars, no Accelerate config file."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", TQDM_DISABLE="1")
    env.pop("ACCELERATE_CONFIG_FILE", None)
    return env


def run_module(module: str, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in a fresh process run in ``cwd``; returns the completed process (not checked)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=subprocess_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
