"""deq-lm's step profiles (packages/deq-lm/benchmarks/profile_step.py, profile_copy400.py), which time the step with
the checkout's ``lab.steptime``: their ``--quick`` runs, and the run-time estimate of profile_copy400."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import subprocess_env

BENCHMARKS = Path(__file__).resolve().parents[1] / "packages" / "deq-lm" / "benchmarks"


def load_script(name: str) -> ModuleType:
    """Import benchmarks/<name>.py under a unique module name (its helper module _lm_bench sits beside it)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"deq_lm_bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is being made
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args], env=subprocess_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def test_profile_quick_script(tmp_path: Path) -> None:
    """The split of the DEQ step: every part, the calls of f counted, shares summing to about 100 %."""
    out = tmp_path / "profile.md"
    proc = run_script("profile_step", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-lm/benchmarks/profile_step.py --quick")
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    parts = [r[0].strip() for r in rows]
    assert parts[:3] == ["f forward: solver calls", "f forward: with autograd", "f backward"]
    assert {"forward solver", "adjoint solver", "weight norm", "optimizer"} <= set(parts)
    shares = [float(r[2].strip().rstrip("%")) for r in rows]
    assert sum(shares) == pytest.approx(100.0, abs=1.0)
    assert all(s >= 0 for s, p in zip(shares, parts) if p != "other")
    assert "DEQ step / twin step:" in text and "calls of f" in text


def test_profile_copy400_quick_script(tmp_path: Path) -> None:
    out = tmp_path / "profile_copy400.md"
    proc = run_script("profile_copy400", "--quick", "--budgets", "100:10", "60:25", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-lm/benchmarks/profile_copy400.py --quick")
    for heading in ("### 1. Before and after", "### 2. Where the time goes", "### 3. The five presets"):
        assert heading in text
    assert "| training step, solving (forward and backward solves) |" in text
    assert "| `pydoc-deq-transformer`: (4, 64) tokens + 64 of memory, width 128, 4 x 32 |" in text
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| `copy400-")]
    assert [row[0].strip() for row in rows] == [f"`copy400-{m}`" for m in ("deq-transformer", "deq-trellisnet", "tcn",
                                                                          "lstm", "gru")]  # fmt: skip
    assert rows[0][2].strip() and not rows[2][2].strip()  # a pretraining cost for the DEQ-Transformer only
    assert all(len(row) == 7 for row in rows)  # two budgets


def test_run_hours_counts_steps_and_evaluations() -> None:
    script = load_script("profile_copy400")
    costs = {"solve": 2.0, "pretrain": 1.0, "valid": 10.0, "test": 40.0, "pretrain_steps": 500.0}
    # 500 pretraining steps, 500 solving ones, validation at 300, 600, 900 and the last step, one test evaluation
    assert script.run_hours(costs, 1000, 300) == pytest.approx((500 * 1 + 500 * 2 + 4 * 10 + 40) / 3600)
    no_pretraining = {"solve": 2.0, "valid": 10.0, "test": 40.0, "pretrain_steps": 0.0}
    assert script.run_hours(no_pretraining, 1000, 500) == pytest.approx((1000 * 2 + 2 * 10 + 40) / 3600)
