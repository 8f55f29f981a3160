"""Run folders of a training script (used by deq-toy, deq-lm and deq-vision), standard library only at import
(``torch`` is imported inside the functions that read and write tensors).

Layout of OUTPUT_DIR::

    .lock                       held (``fcntl.flock``) by the run that trains in the folder: :class:`RunLock`
    config.json                 {"name": preset name, "config": the resolved config, "resumed": [changes, ...]}
    metrics.jsonl               one JSON object per log line (deq_core.experiment.MetricsLog)
    checkpoints/step_0000100/   a complete checkpoint: files written by the task package through a
                                :class:`CheckpointWriter`, then ``checkpoint.json`` (the manifest), then renamed
    checkpoints/step_0000200.partial/   a checkpoint being written (or a save that was killed): never read, removed
                                by the next run in the folder

A checkpoint holds tensors and plain data only: ``torch.save`` files read back with ``weights_only=True``
(:func:`safe_load`), JSON and safetensors. A file that holds anything else (a pickled object or code) raises
:class:`CheckpointError` before anything in it runs.

- :func:`save_training_checkpoint` / :func:`load_training_checkpoint`: a training run's checkpoint (weights, state
  dicts, step, random states, per-process tensors), built on :func:`atomic_checkpoint_dir` and
  :class:`CheckpointWriter` (write a checkpoint aside and rename it when complete).
- :func:`list_checkpoints`, :func:`latest_complete_checkpoint`, :func:`prune_checkpoints`, :func:`resolve_checkpoint`,
  :func:`checkpoint_weights`: the complete checkpoints of a run.
- :func:`safe_load`, :func:`read_json`, :func:`load_checked`: read checkpoint files, nothing executable;
  :func:`save_states` / :func:`load_states`: the state dicts of optimizers, schedules and the like.
- :func:`rng_state`, :func:`set_rng_state`: the random generators (Python, NumPy, torch) as plain data.
- :class:`RunLock`, :func:`check_run_dir`: one run per folder; refuse to train over a run, or to resume nothing.
- :class:`TrainState`: the step counter (and what a task adds), saved as JSON.
- :func:`save_config`, :func:`load_config`, :func:`config_changes`, :func:`check_resume_config`,
  :func:`record_resume`: the config file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")
CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "checkpoint.json"
LOCK_FILE = ".lock"
PARTIAL_SUFFIX = ".partial"
OLD_SUFFIX = ".old"
CHECKPOINT_FORMAT = "deq-checkpoint-2"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: incomplete, or a file that is not tensors and plain data (one line)."""


class RunDirError(ValueError):
    """A run folder that cannot be used as asked: locked by another run, already holding a run (without --resume),
    or holding nothing to resume (one line saying what to do)."""


def _fault_point(label: str) -> None:
    """Called between the steps of a checkpoint save (after each file, before and after the rename). It does
    nothing; fault-injection tests (:mod:`deq_core.testing`) replace it to kill the process there."""


class TrainState:
    """What a training loop must save besides model, optimizer and schedule: the number of optimizer steps taken and
    the number of metrics lines written by then (``MetricsLog.line_count()``; a resumed run keeps those lines and
    no other, ``MetricsLog.resume_at``). Subclass it to carry more plain data (extend :meth:`state_dict` /
    :meth:`load_state_dict`); it is saved as JSON."""

    def __init__(self) -> None:
        self.step = 0
        self.metrics_lines = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "metrics_lines": self.metrics_lines}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.metrics_lines = int(state.get("metrics_lines", 0))


# --- reading checkpoint files: tensors and plain data only ------------------------------------------------------


def load_checked(path: str | Path, loader: Callable[[Path], Any]) -> Any:
    """``loader(path)``, with any failure (missing, truncated, or holding something that is not tensors and plain
    data) turned into one :class:`CheckpointError` naming the file. Use it for safetensors files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete or not one of this project.")
    try:
        return loader(path)
    except Exception as err:  # torch, pickle, safetensors and json raise many types for a foreign file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path} cannot be read as tensors and plain data ({type(err).__name__}: {reason[:200]}); it was not "
            "written by this project's training, or it was modified. Nothing in it was run."
        ) from None


def safe_load(path: str | Path) -> Any:
    """A ``torch.save`` file read with ``torch.load(weights_only=True)`` onto the CPU: tensors, numbers, strings,
    lists, tuples and dicts only; a pickled object raises :class:`CheckpointError` without running anything."""
    import torch

    return load_checked(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))


def read_json(path: str | Path) -> Any:
    """A JSON file of a checkpoint; anything else raises :class:`CheckpointError`."""
    return load_checked(path, lambda p: json.loads(p.read_text(encoding="utf-8")))


# --- writing checkpoints: aside, then renamed --------------------------------------------------------------------


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointWriter:
    """Writes the files of one checkpoint into its temporary folder (:func:`atomic_checkpoint_dir`). Names are
    plain file names; every file is flushed to disk before the folder is renamed."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def save_with(self, name: str, write: Callable[[Path], None]) -> Path:
        """``write(path)`` for a file format this module does not know (e.g. safetensors' ``save_model``)."""
        path = self.folder / name
        write(path)
        _fsync(path)
        _fault_point(f"wrote {name}")
        return path

    def save_torch(self, name: str, obj: Any) -> Path:
        """``torch.save`` of tensors and plain data (read back with :func:`safe_load`)."""
        import torch

        return self.save_with(name, lambda p: torch.save(obj, p))

    def save_json(self, name: str, obj: Any) -> Path:
        """A JSON file (read back with :func:`read_json`)."""
        return self.save_with(name, lambda p: p.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8"))


@contextlib.contextmanager
def atomic_checkpoint_dir(
    output_dir: str | Path, step: int, main: bool = True, barrier: Callable[[], None] | None = None
) -> Iterator[CheckpointWriter]:
    """Write checkpoint ``step`` into ``checkpoints/step_N.partial`` and, once every process has left the block
    without error, add the manifest and rename the folder to ``checkpoints/step_N``. A kill at any moment leaves
    either the complete folder or a ``.partial`` one that no reader uses.

    Args:
        output_dir: the run folder.
        step: optimizer steps taken.
        main: this process creates, completes and renames the folder (the main process of a multi-process run;
            every process may write its own files into it).
        barrier: waits for every process (e.g. ``accelerator.wait_for_everyone``); None for one process.
    """
    sync = barrier or (lambda: None)
    final = checkpoint_path(output_dir, step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    if main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    sync()
    yield CheckpointWriter(partial)
    sync()
    if main:
        files = sorted(p.name for p in partial.iterdir())
        CheckpointWriter(partial).save_json(MANIFEST_FILE, {"format": CHECKPOINT_FORMAT, "step": step, "files": files})
        _fsync(partial)
        _fault_point("before rename")
        old = final.with_name(final.name + OLD_SUFFIX)
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        partial.rename(final)
        _fsync(final.parent)
        shutil.rmtree(old, ignore_errors=True)
        _fault_point("after rename")
    sync()


def checkpoint_path(output_dir: str | Path, step: int) -> Path:
    """OUTPUT_DIR/checkpoints/step_NNNNNNN (zero-padded so that names sort by step)."""
    return Path(output_dir) / CHECKPOINT_DIR / f"step_{step:07d}"


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` is a complete checkpoint: its manifest is valid JSON and every file it lists exists."""
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        return all((folder / name).is_file() for name in manifest["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """The complete checkpoint folders of a run, oldest first (an empty list when there are none). Folders being
    written (``.partial``) and folders without a valid manifest (e.g. written in place by an older version and
    interrupted) are left out."""
    folder = Path(output_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name[5:].isdigit() and p.name.startswith("step_")
                  and is_complete(p))  # fmt: skip


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def clean_partial_checkpoints(output_dir: str | Path) -> list[Path]:
    """Delete the leftovers of interrupted saves (``.partial`` / ``.old`` folders); returns what was deleted.
    Call it only while holding the run's :class:`RunLock`."""
    folder = Path(output_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.endswith((PARTIAL_SUFFIX, OLD_SUFFIX)))
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def prune_checkpoints(output_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints.

    Raises:
        ValueError: ``keep`` < 1 (the newest checkpoint is never deleted).
    """
    if keep < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep}.")
    for old in list_checkpoints(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def resolve_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(run_dir, checkpoint_dir) from either a run directory (its newest complete checkpoint) or a complete
    checkpoint folder.

    Raises:
        FileNotFoundError: neither, or a run directory without a complete checkpoint.
        CheckpointError: (a ValueError) a checkpoint folder that is incomplete.
    """
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        latest = latest_complete_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no complete checkpoint under {path / CHECKPOINT_DIR}.")
        return path, latest
    run_dir = path.parent.parent
    if not (run_dir / CONFIG_FILE).is_file() or not path.is_dir():
        raise FileNotFoundError(
            f"{path} is neither a run directory (with {CONFIG_FILE}) nor a checkpoint folder inside one "
            f"(RUN/{CHECKPOINT_DIR}/step_N)."
        )
    if not is_complete(path):
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no valid {MANIFEST_FILE}: the save was interrupted); pass the run "
            f"directory {run_dir} to use its newest complete checkpoint."
        )
    return run_dir, path


def checkpoint_weights(folder: str | Path) -> Path:
    """The model weights (``model.safetensors``) of a checkpoint folder.

    Raises:
        FileNotFoundError: the folder has none (not a checkpoint of deq-lm / deq-vision).
    """
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} does not exist: {folder} is not a complete checkpoint.")
    return weights


def save_states(ckpt: CheckpointWriter, objects: dict[str, Any]) -> None:
    """Write each object's ``state_dict()`` (optimizer, LR schedule, EMA, grad scaler, ...) to ``NAME.pt``."""
    for name, obj in objects.items():
        ckpt.save_torch(f"{name}.pt", obj.state_dict())


def load_states(folder: str | Path, objects: dict[str, Any]) -> None:
    """Restore what :func:`save_states` wrote: ``obj.load_state_dict(safe_load(folder / NAME.pt))``."""
    for name, obj in objects.items():
        obj.load_state_dict(safe_load(Path(folder) / f"{name}.pt"))


STATE_FILE = "train_state.json"


def save_training_checkpoint(
    output_dir: str | Path,
    state: TrainState,
    objects: dict[str, Any],
    *,
    rank: int = 0,
    processes: int = 1,
    barrier: Callable[[], None] | None = None,
    write_weights: Callable[[Path], None] | None = None,
    per_process: dict[str, Any] | None = None,
) -> None:
    """Write checkpoint ``state.step`` of a run, aside then renamed (:func:`atomic_checkpoint_dir`); every process
    calls it. Files: ``model.safetensors`` (``write_weights(path)``, main process), ``NAME.pt`` for each object's
    state dict (main process), ``train_state.json`` (``state.state_dict()`` and the number of processes), and per
    process ``rng_rankR.pt`` (:func:`rng_state`) and ``NAME_rankR.pt`` for each entry of ``per_process`` (tensors
    and plain data)."""
    main = rank == 0
    with atomic_checkpoint_dir(output_dir, state.step, main, barrier) as ckpt:
        if main:
            if write_weights is not None:
                ckpt.save_with(WEIGHTS_FILE, write_weights)
            save_states(ckpt, objects)
            ckpt.save_json(STATE_FILE, {**state.state_dict(), "processes": processes})
        ckpt.save_torch(f"rng_rank{rank}.pt", rng_state())
        for name, value in (per_process or {}).items():
            ckpt.save_torch(f"{name}_rank{rank}.pt", value)


def load_training_checkpoint(
    folder: str | Path,
    state: TrainState,
    objects: dict[str, Any],
    *,
    rank: int = 0,
    processes: int = 1,
    read_weights: Callable[[Path], Any] | None = None,
    per_process: Collection[str] = (),
) -> dict[str, Any]:
    """Restore what :func:`save_training_checkpoint` wrote into ``folder``: weights (``read_weights(path)``), state
    dicts, ``state``, this process's random states; returns this process's ``per_process`` entries by name.

    Raises:
        CheckpointError: a file is missing or holds something else than tensors and plain data, or the checkpoint
            was written by another number of processes.
    """
    folder = Path(folder)
    saved = read_json(folder / STATE_FILE)
    if not isinstance(saved, dict) or saved.get("processes") != processes:
        found = saved.get("processes") if isinstance(saved, dict) else "?"
        raise CheckpointError(
            f"{folder} was written by {found} process(es), this run has {processes}: resume with the same number."
        )
    if read_weights is not None:
        load_checked(folder / WEIGHTS_FILE, read_weights)
    load_states(folder, objects)
    load_checked(folder / STATE_FILE, lambda _: state.load_state_dict(saved))
    extra = {name: safe_load(folder / f"{name}_rank{rank}.pt") for name in per_process}
    set_rng_state(safe_load(folder / f"rng_rank{rank}.pt"))
    return extra


# --- random generators as plain data ------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's (when installed) and torch's generators (CPU, and CUDA when available) as
    tensors and plain data, for :meth:`CheckpointWriter.save_torch` (one file per process)."""
    import torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    with contextlib.suppress(ImportError):
        import numpy as np

        kind, key, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [kind, torch.from_numpy(key.astype("int64")), int(pos), int(has_gauss), float(cached)]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, key, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, key.numpy().astype("uint32"), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- the run folder: one run at a time, no silent restarts -------------------------------------------------------


class RunLock:
    """An exclusive lock on a run folder (``fcntl.flock`` on OUTPUT_DIR/.lock), held while a run trains in it:
    ``with RunLock(output_dir): ...``. The operating system releases it when the process ends, however it ends.
    On systems without ``fcntl`` (Windows) it does nothing.

    Raises:
        RunDirError: another process holds the lock.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / LOCK_FILE
        self._fd: int | None = None
        self._created = False

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        self._created = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirError(
                f"{self.path.parent} is in use by another training run (pid {holder}); wait for it to finish, or "
                "use another --output-dir."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        if self._created and [p.name for p in self.path.parent.iterdir()] == [LOCK_FILE]:
            self.path.unlink()  # a run that failed before writing anything leaves no folder behind
            self.path.parent.rmdir()
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None


def check_run_dir(output_dir: str | Path, resume: bool) -> Path | None:
    """Where a run in ``output_dir`` starts: the checkpoint to resume from (``resume``), or None for a new run.

    A new run needs a folder without a complete checkpoint (a folder a run left before its first checkpoint may be
    reused: nothing in it can be resumed). Call it while holding the :class:`RunLock`.

    Raises:
        RunDirError: ``resume`` and the folder does not exist or holds no complete checkpoint; or not ``resume``
            and the folder holds a run with a checkpoint.
    """
    output_dir = Path(output_dir)
    latest = latest_complete_checkpoint(output_dir)
    if resume and latest is None:
        raise RunDirError(
            f"--resume: no complete checkpoint in {output_dir / CHECKPOINT_DIR} (or no such folder); run without "
            "--resume to start a new run there."
        )
    if not resume and latest is not None:
        raise RunDirError(
            f"{output_dir} already holds a run (checkpoint {latest.name}); pass --resume to continue it, or use "
            "another --output-dir."
        )
    return latest


# --- the config file ------------------------------------------------------------------------------------------


def _as_dict(cfg: Any) -> dict[str, Any]:
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)


def _write_json_atomic(path: Path, data: Any) -> None:
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def save_config(cfg: Any, output_dir: str | Path, name: str, **extra: Any) -> Path:
    """Write OUTPUT_DIR/config.json with the preset name, the resolved config and ``extra`` top-level entries
    (e.g. ``data_dir``) for a new run; returns its path. Write it after the data were checked."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / CONFIG_FILE
    _write_json_atomic(path, {"name": name, "config": _as_dict(cfg), **extra})
    return path


def load_config(run_dir: str | Path, config_cls: type[C]) -> tuple[str, C]:
    """(preset name, config) saved in ``run_dir/config.json``, as an instance of the dataclass ``config_cls``. Keys
    the class no longer has are dropped, fields the file lacks take their defaults, and JSON lists become tuples
    (config dataclasses are frozen).

    Raises:
        FileNotFoundError: no config.json (not a run directory).
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the output directory of a training run?")
    data = read_json(path)
    known = {f.name for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items() if k in known}
    return data.get("name", "?"), config_cls(**values)


def config_changes(saved: Any, current: Any, resumable: Collection[str] = ()) -> dict[str, tuple[Any, Any]]:
    """{key: (saved, current)} for settings that differ, except those listed in ``resumable`` (settings that may
    change when a run is resumed because they do not change what is computed)."""
    a, b = _as_dict(saved), _as_dict(current)
    return {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and k not in resumable}


class ResumeConfigError(ValueError):
    """Resuming a run with a config that changes what it computes (a user error: the message lists the changes)."""


def check_resume_config(
    run_dir: str | Path, current: Any, resumable: Collection[str] = (), **extra: Any
) -> dict[str, tuple[Any, Any]]:
    """Before resuming in ``run_dir``: refuse a config that changes what the saved run computes; return the allowed
    changes ({key: (saved, current)} of ``resumable`` settings and of ``extra`` top-level entries such as
    ``data_dir``), for :func:`record_resume`. Nothing to check when the directory has no config.json.

    Raises:
        ResumeConfigError: (a ValueError) listing each refused key as ``key: saved -> current``.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    _, saved = load_config(run_dir, type(current))
    changes = config_changes(saved, current, resumable)
    if changes:
        listed = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items())
        raise ResumeConfigError(
            f"--resume with a different config than the run in {run_dir}: {listed}. Resume with the run's settings, "
            "or train with the new ones in another --output-dir."
        )
    allowed = config_changes(saved, current)
    data = read_json(path)
    allowed.update({k: (data.get(k), v) for k, v in extra.items() if data.get(k) != v})
    return allowed


def record_resume(run_dir: str | Path, step: int, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append ``{"step": step, "changes": {key: [saved, current]}}`` to the ``resumed`` list of config.json (the
    config itself stays the one the run started with). Nothing is written when there are no changes."""
    if not changes:
        return
    path = Path(run_dir) / CONFIG_FILE
    data = read_json(path)
    data.setdefault("resumed", []).append({"step": step, "changes": {k: list(v) for k, v in changes.items()}})
    _write_json_atomic(path, data)
