"""Every benchmark script that ``nox -s bench`` runs for deq-core takes ``--device``: ``cuda`` on a machine without
a GPU (made so for the subprocess by ``CUDA_VISIBLE_DEVICES=""``, whatever this machine has) ends the script at once
with argparse's one-line error and exit status 2, before anything is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("[!_]*.py") if p.name != "problems.py")  # as the noxfile


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_scripts_are_found() -> None:
    assert {"end_to_end.py", "memory.py", "solvers.py", "weight_norm.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_gpu_is_a_one_line_error(script: str) -> None:
    proc = run(script, "--device", "cuda", "--quick")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{script}: error: argument --device: device 'cuda' is not available: this machine has no CUDA GPU; "
        "use --device cpu"
    )
    assert "--device NAME" in run(script, "--help").stdout
