"""The benchmarks in packages/deq-vision/benchmarks: the profile's ``--quick`` run and every script's ``--device``."""

from __future__ import annotations

import os
import re
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


def test_scripts_found() -> None:
    assert {"memory_time", "profile_step"} <= set(SCRIPTS)


def test_profile_quick_script(tmp_path: Path) -> None:
    """The split of the MDEQ step: every part, the calls of f counted, shares summing to about 100 %."""
    out = tmp_path / "profile.md"
    proc = run_script("profile_step", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-vision/benchmarks/profile_step.py --quick")
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    parts = [r[0].strip() for r in rows]
    assert parts[:3] == ["f forward: solver calls", "f forward: with autograd", "f backward"]
    assert {"forward solver", "adjoint solver", "weight norm", "optimizer"} <= set(parts)
    shares = [float(r[2].strip().rstrip("%")) for r in rows]
    assert sum(shares) == pytest.approx(100.0, abs=1.0)
    assert all(s >= 0 for s, p in zip(shares, parts) if p != "other")
    found = re.search(r"\((\d+) calls of f, (\d+) backward passes", text)
    assert found is not None
    calls, passes = int(found[1]), int(found[2])
    assert 2 <= calls <= 13 and 2 <= passes <= 13  # Broyden limits 12 + 12, plus the tracked call and the final pass


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_gpu_is_a_one_line_error(script: str) -> None:
    """``--device cuda`` without a GPU (CUDA_VISIBLE_DEVICES="" for the subprocess): argparse's one-line error."""
    proc = run_script(script, "--device", "cuda", "--quick", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{script}.py: error: argument --device: device 'cuda' is not available: this machine has no CUDA GPU; "
        "use --device cpu"
    )
