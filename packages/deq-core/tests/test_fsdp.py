"""A DEQ under torch's FSDP, on CPU over gloo (two processes): with the whole model one FSDP unit, FSDP1 and FSDP2
give the gradients of one process on the whole batch (the solve's calls of f all happen inside the unit's forward,
whatever their number on each rank), and the gathered full state dict has the unwrapped model's names. (A unit inside
f is not tested: the ranks' solves stop at different iterations and gather that unit a different number of times,
which hangs; docs/scale-out.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deq_core.train.testing.processes import free_port, launch_env

WORKER = Path(__file__).with_name("fsdp_deq_worker.py")


def test_a_deq_in_one_fsdp_unit_gets_the_gradients_of_one_process(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", free_port(), str(WORKER),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=launch_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [row["mode"] for row in rows] == ["fsdp1", "fsdp2"]
    for row in rows:
        # float64, solves to 1e-12: the sharded gradients differ from one process's by rounding only
        assert row["grad_diff"] < 1e-10, row
        assert row["keys"] == ["cell.bias", "cell.weight", "head.bias", "head.weight", "inject.bias", "inject.weight"]
