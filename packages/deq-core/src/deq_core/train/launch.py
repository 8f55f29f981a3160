"""What the launcher decides for a run's processes, and what happens when one of them stops answering.

- Mixed precision: ``accelerate launch --mixed_precision bf16`` (or ``accelerate config``'s default) reaches the
  processes as :data:`PRECISION_ENV`. :func:`choose_precision` decides what the training skeleton passes to
  ``Accelerator``: the config's value when it sets one (one console line when the launcher said otherwise), else the
  launcher's (None: Accelerate reads the variable), and on resume the precision the run recorded in config.json
  (:data:`PRECISION_KEY`; :func:`recorded_precision`).
- A stalled process: the process group waits ``dist_timeout`` seconds (:func:`process_group_kwargs`) instead of
  torch's 30 minutes; when a collective operation times out, :func:`unanswered_line` names the ranks that did not
  answer a monitored barrier on a spare gloo group (:func:`liveness_group`), and the skeleton stops with
  :class:`ProcessTimeoutError`.
- A sharded mode (``accelerate launch --use_fsdp`` / ``--use_deepspeed``, or ``accelerate config``'s): refused in one
  line before Accelerate starts (:func:`refuse_sharded_modes`); the processes train with DDP (``--multi_gpu``).
- A dead process: its connections close, and a collective operation of the others fails at once with gloo's
  "Connection reset by peer" (:func:`is_peer_lost`); :func:`lost_line` says which rank is gone, and the skeleton stops
  with :class:`ProcessLostError` (the launcher then stops the others).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from .errors import UsageError
from .run_config import ResumeConfigError, flat_dict

__all__ = [
    "PRECISION_ENV",
    "PRECISION_KEY",
    "ProcessLostError",
    "ProcessTimeoutError",
    "choose_precision",
    "is_collective_timeout",
    "is_peer_lost",
    "liveness_group",
    "lost_line",
    "process_group_kwargs",
    "recorded_precision",
    "refuse_sharded_modes",
    "unanswered_line",
]

PRECISION_ENV = "ACCELERATE_MIXED_PRECISION"
"""The environment variable through which ``accelerate launch --mixed_precision`` (and ``accelerate config``) tell the
processes their precision."""

PRECISION_KEY = "mixed_precision"
"""The top-level entry of config.json with the precision the run trains in (a resume keeps it)."""

_LIVENESS_WAIT = 60.0
"""At most this many seconds (and at most ``dist_timeout``) the processes that are left wait for each other, after a
timed-out collective, to find out which ranks do not answer."""


class ProcessTimeoutError(RuntimeError):
    """A collective operation of several processes timed out: a process stopped answering (stopped, hung, dead or
    slower than ``dist_timeout``). The message is the one line naming the ranks that did not answer."""


class ProcessLostError(RuntimeError):
    """Another process of the run died (killed, crashed) during a collective operation: its connection was reset.
    The message is the one line naming it (:func:`lost_line`)."""


def choose_precision(
    configured: str | None, recorded: str | None = None, launcher: str | None = None
) -> tuple[str | None, str | None]:
    """(the ``mixed_precision`` to pass to ``Accelerator``, a console line or None) from the config's value
    (``configured``; None: unset), the one a resumed run recorded (``recorded``; None for a new run or a run that
    recorded none) and the launcher's (``launcher``, :data:`PRECISION_ENV`; None: not set).

    A resumed run keeps its precision. Otherwise the config's value wins when it sets one (explicit), with a line when
    the launcher set another; unset, the launcher's applies (None is returned: Accelerate reads the variable).

    Raises:
        ResumeConfigError: the config sets another precision than the resumed run recorded.
    """
    launcher = launcher.lower() if launcher else None
    if recorded is not None:
        if configured is not None and configured != recorded:
            raise ResumeConfigError(
                f"--resume with run.mixed_precision={configured} where the run trained in {recorded} (config.json "
                f"'{PRECISION_KEY}'): resume with run.mixed_precision={recorded} or unset, or train in another "
                "--output-dir."
            )
        line = None
        if launcher is not None and launcher != recorded:
            line = (
                f"mixed precision {recorded}: the run's (config.json '{PRECISION_KEY}'), not the launcher's {launcher} "
                f"({PRECISION_ENV}, accelerate launch --mixed_precision): a resumed run keeps its precision"
            )
        return recorded, line
    if configured is None:
        return None, None
    line = None
    if launcher is not None and launcher != configured:
        line = (
            f"mixed precision {configured}: run.mixed_precision={configured} (set in the config) wins over the "
            f"launcher's {launcher} ({PRECISION_ENV}, accelerate launch --mixed_precision); unset it to follow the "
            "launcher"
        )
    return configured, line


def recorded_precision(saved: Mapping[str, Any]) -> str | None:
    """The precision a run recorded in its config.json (``saved``, as read): :data:`PRECISION_KEY`, else (a run
    written before it was recorded) the config's own ``run.mixed_precision`` when it set one, else None."""
    value = saved.get(PRECISION_KEY)
    if isinstance(value, str):
        return value
    flat = flat_dict(saved.get("config") or {})
    value = flat.get("run.mixed_precision", flat.get("mixed_precision"))
    return value if isinstance(value, str) else None


SHARDED_MODES = {
    "ACCELERATE_USE_FSDP": (
        "FSDP (accelerate launch --use_fsdp): the training skeleton checkpoints the main process's model and "
        "optimizer, which under FSDP hold its shards only (and on CPU Accelerate ignores FSDP: nothing is sharded)"
    ),
    "ACCELERATE_USE_DEEPSPEED": (
        "DeepSpeed (accelerate launch --use_deepspeed): its engine takes over the optimizer, gradient accumulation and "
        "clipping the training skeleton does itself, and its ZeRO stages shard the state the checkpoints save"
    ),
}
"""The environment variables through which ``accelerate launch`` (and ``accelerate config``) ask for a sharded mode,
and why the training skeleton cannot run in it."""


def refuse_sharded_modes(environ: Mapping[str, str]) -> None:
    """Raise :class:`~deq_core.train.errors.UsageError` (one line) when the launcher asked for FSDP or DeepSpeed
    (:data:`SHARDED_MODES`, read from ``environ``); call it before building the ``Accelerator``, which would import
    DeepSpeed or, on CPU, silently train unsharded."""
    for variable, why in SHARDED_MODES.items():
        if environ.get(variable, "false").lower() == "true":
            raise UsageError(
                f"{variable}=true: this trainer does not run under {why}; launch with --multi_gpu (DDP: every "
                "process holds the whole model) and without a sharded mode in accelerate config."
            )


def process_group_kwargs(timeout_s: float) -> Any:
    """Accelerate's ``InitProcessGroupKwargs`` with a process-group timeout of ``timeout_s`` seconds."""
    from accelerate.utils import InitProcessGroupKwargs

    return InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=timeout_s))


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def liveness_group(timeout_s: float) -> Any:
    """A spare gloo process group for :func:`unanswered_line` (every process must call this, in the same order of
    process-group creation), or None for a single process. Its own connections stay usable when a collective of the
    main group times out (gloo closes those)."""
    if _world() < 2:
        return None
    import torch.distributed as dist

    wait = datetime.timedelta(seconds=min(timeout_s, _LIVENESS_WAIT))
    return dist.new_group(backend="gloo", timeout=wait)


def is_collective_timeout(error: BaseException) -> bool:
    """Whether ``error`` is a timed-out collective operation of several processes (gloo: "Timed out waiting ... for
    recv operation"; a later call on the same connections: "Application timeout caused pair closure")."""
    timed_out = re.search(r"timed out|timeout", str(error), re.IGNORECASE) is not None
    return isinstance(error, RuntimeError) and timed_out and _world() > 1


def is_peer_lost(error: BaseException) -> bool:
    """Whether ``error`` is a collective operation of several processes that lost another process: gloo's "Connection
    reset by peer" / "Connection closed by peer", which a process that died leaves to the others at once."""
    lost = re.search(r"Connection (reset|closed) by peer", str(error)) is not None
    return isinstance(error, RuntimeError) and lost and _world() > 1


def lost_line() -> str:
    """After a collective that lost another process (:func:`is_peer_lost`): the one line saying so. With two
    processes the other one is named; with more, which one died is in its own output (there is no time to find out:
    the launcher stops the processes that are left)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    other = f"rank {1 - rank}" if world == 2 else "another rank"
    return (
        f"rank {rank}: {other} closed its connection during a collective operation (it died or was killed: see its "
        "own output); the run stops (resume it from its last checkpoint with --resume)"
    )


def _ranks(numbers: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", numbers)]


def _named(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def unanswered_line(group: Any, timeout_s: float) -> str:
    """After a timed-out collective: the one line naming the ranks that did not answer (every process that is left
    calls this). Rank 0 waits on ``group`` (:func:`liveness_group`) for all the others and names the missing ones;
    another rank learns only whether rank 0 answered."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    wait = min(timeout_s, _LIVENESS_WAIT)
    start = f"rank {rank}: a collective operation timed out after {timeout_s:g} s (run.dist_timeout): "
    end = "; the run stops (resume it from its last checkpoint with --resume)"
    try:
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=wait), wait_all_ranks=True)
    except RuntimeError as err:
        text = str(err)
        missing = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
        if missing:
            return start + f"{_named(_ranks(missing.group(1)))} did not answer (stopped, hung or dead)" + end
        if "from rank 0" in text:
            also = "" if world == 2 else "; or rank 0 found another rank missing: see its line"
            return start + f"rank 0 did not answer (stopped, hung or dead{also})" + end
        return start + f"which ranks did not answer is unknown ({text.splitlines()[0]})" + end
    return start + f"every rank answered {wait:g} s later: one was slower than run.dist_timeout, raise it" + end
