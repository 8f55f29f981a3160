"""The benchmarks in packages/deq-vision/benchmarks: every script's ``--device``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("[!_]*.py"))  # what nox -s bench runs


def run_script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **(env or {}))
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args], env=env, capture_output=True, text=True, timeout=240
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_gpu_is_a_one_line_error(script: str) -> None:
    """``--device cuda`` without a GPU (CUDA_VISIBLE_DEVICES="" for the subprocess): argparse's one-line error."""
    proc = run_script(script, "--device", "cuda", "--quick", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{script}.py: error: argument --device: device 'cuda' is not available: this machine has no CUDA GPU; "
        "use --device cpu"
    )
