"""Several processes on one host for tests of multi-process training: a free TCP port on 127.0.0.1 for the
rendezvous, and the environment a launched process gets (no launcher settings inherited from the caller's)."""

from __future__ import annotations

import os
import socket

__all__ = ["free_port", "launch_env"]


def free_port() -> str:
    """A TCP port on 127.0.0.1 that was free a moment ago (the operating system's pick), as the launchers take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def launch_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``ACCELERATE_*`` variables (an ``accelerate config`` or launch of the caller
    must not reach the processes a test starts), one OpenMP thread, Python warnings off, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **extra}
