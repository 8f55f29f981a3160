"""The iteration-limit benchmark (``benchmarks/broyden_limit.py``) at its --quick size: it runs, its table has a row
per limit, and what it counts in bytes (peak memory, deterministic) and iterates follow the iterations made, not the
limit. Times are printed, never asserted.

Needs TorchDEQ 0.1.0 (installed by ``nox -s tests`` for deq-core, never a dependency of deq-core)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_quick_benchmark


def test_quick_report(tmp_path: Path) -> None:
    out = tmp_path / "limit.md"
    text = run_quick_benchmark("broyden_limit.py", out)
    assert text.startswith("Command: `OMP_NUM_THREADS=1 python packages/deq-core/benchmarks/broyden_limit.py --quick")
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r[0]) for r in rows] == [12, 200, 1000]
    nfe = {tuple(int(n) for n in r[1].split("/")) for r in rows}
    assert len(nfe) == 1 and next(iter(nfe))[0] < 12  # the same iterations at every limit, stopped by tolerance
    ours_mib = [float(r[5].split("(")[0]) for r in rows]
    tdeq_mib = [float(r[6].split("(")[0]) for r in rows]
    assert max(ours_mib) <= 1.2 * ours_mib[0], ours_mib  # bytes follow the iterations made
    assert tdeq_mib[-1] > 10 * tdeq_mib[0]  # the peer's allocation grows with the limit: the row measures something
    assert "- Our iterates bit-identical at every limit: yes." in text
    assert "- Ours no slower and no larger than TorchDEQ at every limit: " in text
