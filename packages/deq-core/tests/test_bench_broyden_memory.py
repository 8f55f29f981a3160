"""The Broyden memory benchmark (``benchmarks/broyden_memory.py``) at its --quick size: the report's table, and the
claims it is built on: the default keeps every update (the same iterates as memory = max_iter) and a rank reduction
costs iterations on a near-critical problem.

Needs TorchDEQ 0.1.0 (installed by ``nox -s tests`` for deq-core, never a dependency of deq-core)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import deq_core
from conftest import BENCHMARKS, run_quick_benchmark


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import broyden_memory

        yield broyden_memory
    finally:
        sys.path.remove(str(BENCHMARKS))


def _nfe(problem, **options: object) -> tuple[int, float]:
    res = deq_core.solve(problem.f, problem.z0, "broyden", max_iter=problem.max_iter, tol=1e-4, **options)
    return res.nfe, float(res.residual.max())


def test_default_keeps_every_update_and_reduction_costs_iterations(bench: ModuleType) -> None:
    problem = bench.gauss_problem(64, 0.99)
    default, full = _nfe(problem), _nfe(problem, memory=problem.max_iter)
    assert default == full and default[1] <= 1e-4
    reduced = _nfe(problem, memory=10)
    assert reduced[0] > default[0]  # the reduction to 5 updates loses the curvature the solve needs


def test_quick_report(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "broyden.md"
    text = run_quick_benchmark("broyden_memory.py", out)
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/broyden_memory.py --quick")
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| gauss-")]
    assert [r[0].strip() for r in rows] == [f"gauss-{d}-{rho}" for d in (16, 64) for rho in (0.9, 0.95, 0.99)]
    for cells in rows:
        nfe = [int(c.split("/")[0].strip().rstrip("*")) for c in cells[1:-3]]
        kib = [float(c.split("/")[1]) for c in cells[1:-3]]
        medians = [float(x) for x in cells[-3].split("/")] + [float(x) for x in cells[-1].split("/")]
        assert all(1 <= n <= 100 for n in nfe) and all(k > 0 for k in kib) and all(1 <= m <= 100 for m in medians)
        mean_diff, se_diff = (float(x) for x in cells[-2].split("±"))
        assert abs(mean_diff) <= 99 and se_diff >= 0
    # the verdict is printed (not asserted MET: float32 counts of equal methods can differ by one across CPUs)
    assert len(rows[0]) == 10
    assert "- Our default Broyden needs <= TorchDEQ's median NFE wherever TorchDEQ converges: " in text


def test_gauss_problem_is_near_critical(bench: ModuleType) -> None:
    """rho(J_f(z*)) ~ rho: the small injection keeps tanh' ~ 1 at the fixed point."""
    problem = bench.gauss_problem(16, 0.95)
    z = deq_core.solve(problem.f, problem.z0, "broyden", max_iter=100, tol=1e-6).z
    rho = deq_core.spectral_radius(problem.f, z, n_iters=16, seed=0)
    assert torch.allclose(rho, torch.full_like(rho, 0.95), atol=0.02), rho


def test_paired_difference(bench: ModuleType) -> None:
    from solvers import paired_difference

    mean, se = paired_difference([48, 47, 50], [47, 47, 48])  # differences 1, 0, 2
    assert mean == 1.0 and se == pytest.approx(1 / 3**0.5)
    with pytest.raises(ValueError):
        paired_difference([1, 2], [1])
