"""deq-vision's step profile (packages/deq-vision/benchmarks/profile_step.py), which times the step with the
checkout's ``lab.steptime``: its ``--quick`` run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "packages" / "deq-vision" / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("[!_]*.py"))  # what nox -s bench runs


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
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
