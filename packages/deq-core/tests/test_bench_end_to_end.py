"""The end-to-end benchmark (``benchmarks/end_to_end.py``) against TorchDEQ at tiny sizes: its counts, its report and
that both libraries compute the same gradients of the same models (so that its time ratios compare equal work).

Needs TorchDEQ 0.1.0 (installed by ``nox -s tests`` for deq-core, never a dependency of deq-core)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def e2e() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import end_to_end

        yield end_to_end
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_meter_counts_what_deq_core_reports(e2e: ModuleType) -> None:
    """The wrapper's forward NFE equals deq-core's own count; its backward count is the adjoint solve's calls plus the
    gradient w.r.t. z* of the final backward pass; one call of f with autograd (TorchDEQ: two)."""
    model, sizes = e2e.M.build("gru", quick=True, seed=0)
    batch = e2e.make_batches(model, sizes, 0, CPU)[0]
    ours = e2e.Trainer(model, e2e.Ours("anderson", e2e.TRAINING))
    ours.timed_step(batch, CPU)
    info = ours.library.info
    rec = ours.record
    assert rec.nfe == [info.nfe] and info.nfe > 1
    assert rec.vjps == [info.nfe_backward + 1]
    assert rec.autograd_calls == [1]
    assert rec.residual[0] == pytest.approx(float(info.residual.max()), rel=1e-3)
    theirs = e2e.Trainer(model, e2e.TorchDEQ("anderson", e2e.TRAINING))
    theirs.timed_step(batch, CPU)
    assert theirs.record.autograd_calls == [2] and theirs.record.nfe[0] > 1 and theirs.record.vjps[0] >= 1


@pytest.mark.parametrize("name", ["conv", "transformer", "gru", "quickstart"])
def test_both_libraries_compute_the_same_gradients(e2e: ModuleType, name: str) -> None:
    """Same weights, batch, f and loss: in float64, with both solves converged to a relative residual of 1e-10, the
    gradients differ by the solves' errors only. Those are about tol / (1 - rho) relative, rho < 0.9 here (both converge
    within 200 iterations), so 1e-10 x 10 per solve; 1e-6 leaves a factor 1e4 for the conditioning of the loss."""
    assert e2e.gradient_agreement(name, quick=True, seed=0, device=CPU) < 1e-6


def test_quick_run_reports_finite_ratios_and_counts(e2e: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "e2e.md"
    assert e2e.main(["--quick", "--steps", "1", "--out", str(out)]) == 0
    lines = [line for line in out.read_text().splitlines() if line.startswith("| ") and "---" not in line]
    header, rows = lines[0], lines[1:]
    assert "time ours/TorchDEQ" in header
    assert {(r.split("|")[1].strip(), r.split("|")[2].strip()) for r in rows} == {
        (m, s) for m in ("conv", "transformer", "gru", "quickstart") for s in ("anderson", "broyden")
    }
    for r in rows:
        cells = [c.strip() for c in r.split("|")[1:-1]]
        ratio, nfe, vjps, peak_ratio = float(cells[2]), cells[4], cells[5], float(cells[10])
        assert math.isfinite(ratio) and ratio > 0
        assert math.isfinite(peak_ratio) and peak_ratio > 0
        for count in (*nfe.split(" / "), *vjps.split(" / ")):
            assert math.isfinite(float(count)) and float(count) >= 1
