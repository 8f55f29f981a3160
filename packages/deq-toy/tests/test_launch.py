"""Two CPU processes: ``accelerate launch --mixed_precision bf16`` is honoured when the config does
not set a precision, a stalled rank (SIGSTOP) stops the other within ``run.dist_timeout`` with a line naming it
instead of blocking for torch's 30 minutes, and a killed rank (SIGKILL) stops the other at once with a line naming it
instead of gloo's traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from deq_core.train.metrics import read_metrics

OPTIONS = ["--config", "synthetic-tiny", "--no-progress"]


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TQDM_DISABLE="1", PYTHONUNBUFFERED="1")
    return env


def test_accelerate_launch_mixed_precision_reaches_the_run(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", _free_port(),
        "-m", "deq_toy.train", *OPTIONS, "--output-dir", str(out), "--stop-after", "5",
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout and "mixed precision" not in proc.stdout  # nothing overrode the launcher
    config = json.loads((out / "config.json").read_text())
    assert config["mixed_precision"] == "bf16" and config["config"]["run"]["mixed_precision"] is None
    assert read_metrics(out / "metrics.jsonl")[0]["step"] == 5


def _wait_for(path: Path, text: str, procs: list[subprocess.Popen], deadline: float) -> None:
    while text not in (path.read_text() if path.exists() else ""):
        assert all(p.poll() is None for p in procs), [p.poll() for p in procs]
        assert time.monotonic() < deadline, f"{text!r} not seen in {path}"
        time.sleep(0.1)


@pytest.mark.parametrize("stalled", [1, 0])  # rank 0 also hosts the rendezvous store here
def test_a_stalled_rank_is_named_and_the_other_stops_within_the_timeout(tmp_path, stalled):
    timeout, left = 3.0, 1 - stalled
    port, out = _free_port(), tmp_path / "run"
    command = [sys.executable, "-m", "deq_toy.train", *OPTIONS, "--output-dir", str(out)]
    command += ["optim.epochs=5000", f"run.dist_timeout={timeout}", "run.log_every=1000", "run.eval_every=0"]
    procs, logs = [], []
    for rank in (0, 1):  # what torchrun --nproc_per_node 2 sets up
        env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")  # fmt: skip
        logs.append((tmp_path / f"out{rank}.txt", tmp_path / f"err{rank}.txt"))
        with logs[-1][0].open("w") as stdout, logs[-1][1].open("w") as stderr:
            procs.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=stdout, stderr=stderr))
    try:
        _wait_for(logs[0][0], "2 process(es)", procs, time.monotonic() + 45)  # both ranks are training
        os.kill(procs[stalled].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        code = procs[left].wait(timeout=60)
        took = time.monotonic() - stopped
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = logs[left][1].read_text()
    assert code == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith(f"rank {left}: a collective operation timed out")]
    assert lines == [
        f"rank {left}: a collective operation timed out after 3 s (run.dist_timeout): rank {stalled} did not answer "
        "(stopped, hung or dead); the run stops (resume it from its last checkpoint with --resume)"
    ], err[-3000:]
    assert "Traceback" not in err
    # the timeout, then as long again for the ranks left to find out who is missing, and the exit
    assert took < 2 * timeout + 15, took


def test_a_killed_rank_is_named_in_one_line_by_the_other(tmp_path):
    """accelerate launch --multi_gpu --num_processes 2: rank 1 is killed while both train; rank 0's collective loses
    its connection, and rank 0 stops at once with one line (before: gloo's "Connection reset by peer" traceback)."""
    out, stdout, stderr = tmp_path / "run", tmp_path / "out.txt", tmp_path / "err.txt"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", _free_port(),
        "-m", "deq_toy.train", *OPTIONS, "--output-dir", str(out),
        "optim.epochs=5000", "run.log_every=1000", "run.eval_every=0",
    ]  # fmt: skip
    with stdout.open("w") as out_file, stderr.open("w") as err_file:
        launcher = subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=out_file, stderr=err_file)
    try:
        _wait_for(stdout, "2 process(es)", [launcher], time.monotonic() + 90)  # both ranks are training
        ranks = {}
        for child in psutil.Process(launcher.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                ranks[int(child.environ()["RANK"])] = child
        ranks[1].kill()
        killed = time.monotonic()
        code = launcher.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if launcher.poll() is None:
            for child in psutil.Process(launcher.pid).children(recursive=True):
                child.kill()
            launcher.kill()
            launcher.wait()
    err = stderr.read_text()
    assert code != 0 and took < 30, (code, took)
    lines = [line for line in err.splitlines() if line.startswith("rank 0: ")]
    assert lines == [
        "rank 0: rank 1 closed its connection during a collective operation (it died or was killed: see its own "
        "output); the run stops (resume it from its last checkpoint with --resume)"
    ], err[-3000:]
    assert "Connection reset by peer" not in err and "[rank0]" not in err, err[-3000:]
