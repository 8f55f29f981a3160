"""Fault injection for the tests of training scripts.

``python -m deq_core.train.faults KILL_AT MODULE [ARGS...]`` runs ``python -m MODULE ARGS...`` and kills its own process
with SIGKILL at the KILL_AT-th fault point of checkpoint saving (after each file written into the temporary folder,
before and after its rename: :func:`deq_core.train.checkpoints._fault_point`); KILL_AT = 0 never kills.

:func:`train_with_faults` runs a training command again and again, killing it at chosen save points or at random
moments of training, resuming each time, until it finishes. :func:`plant_pickle` replaces a file with a pickle that
runs code when unpickled by a loader that allows it (to show that no loader of a checkpoint does).
"""

from __future__ import annotations

import os
import random
import runpy
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import checkpoints

__all__ = ["Kill", "plant_pickle", "random_kills", "train_with_faults"]


def _install_kill(kill_at: int) -> None:
    count = 0

    def point(label: str) -> None:
        nonlocal count
        count += 1
        if count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoints._fault_point = point  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    kill_at, module, rest = int(args[0]), args[1], args[2:]
    if kill_at > 0:
        _install_kill(kill_at)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


class _Planted:
    """Unpickling this (with a loader that runs code) writes the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def plant_pickle(path: Path, marker: Path) -> None:
    """Replace ``path`` with a ``torch.save`` file holding an object whose unpickling writes ``marker``."""
    import torch

    Path(path).unlink(missing_ok=True)
    torch.save(_Planted(str(marker)), path)


@dataclass(frozen=True)
class Kill:
    """Where one attempt is killed: at the ``save_point``-th fault point of saving (> 0), or ``delay`` seconds
    after the metrics file has ``after_lines`` lines (when ``save_point`` is 0)."""

    save_point: int = 0
    after_lines: int = 0
    delay: float = 0.0


def random_kills(seed: int, n: int, max_lines: int, max_save_point: int) -> list[Kill]:
    """``n`` kills drawn with ``random.Random(seed)``: alternately at a random save point and at a random moment
    (after a random number of metrics lines, plus up to 0.3 s)."""
    rng = random.Random(seed)
    kills = []
    for i in range(n):
        if i % 2 == 0:
            kills.append(Kill(save_point=rng.randint(1, max_save_point)))
        else:
            kills.append(Kill(after_lines=rng.randint(1, max_lines), delay=rng.uniform(0.0, 0.3)))
    return kills


def _line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _attempt(command: list[str], kill: Kill | None, metrics: Path, env: dict[str, str], timeout: float) -> int:
    """Run ``command`` (a ``python -m deq_core.train.faults ...`` line) once; returns its exit code (-9 when killed)."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    start_lines = _line_count(metrics)
    try:
        if kill is not None and kill.save_point == 0:
            while proc.poll() is None and _line_count(metrics) < start_lines + kill.after_lines:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{command} ran over {timeout} s")
                time.sleep(0.01)
            time.sleep(kill.delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{' '.join(command)} exited with {proc.returncode}:\n{err}")
    return proc.returncode


def train_with_faults(
    module: str, args: Sequence[str], output_dir: Path, kills: Sequence[Kill], timeout: float = 120.0
) -> list[int]:
    """Train with ``python -m MODULE ARGS... --output-dir OUTPUT_DIR``, killed as ``kills`` say, one kill per
    attempt, then once more without a kill; each attempt after the first passes ``--resume`` when the folder has a
    complete checkpoint. Stops when an attempt finishes (exit 0). Returns the exit codes (-9: killed).

    Raises:
        RuntimeError: an attempt failed otherwise (its stderr is in the message).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    metrics = Path(output_dir) / "metrics.jsonl"
    codes: list[int] = []
    for kill in [*kills, None]:
        resume = ["--resume"] if checkpoints.latest_complete_checkpoint(output_dir) is not None else []
        point = str(kill.save_point) if kill is not None else "0"
        command = [sys.executable, "-m", "deq_core.train.faults", point, module, *args, "--output-dir", str(output_dir)]
        codes.append(_attempt([*command, *resume], kill, metrics, env, timeout))
        if codes[-1] == 0:
            break
    return codes


if __name__ == "__main__":
    main()
