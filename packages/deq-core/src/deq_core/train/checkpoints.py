"""Checkpoint folders of a run, written aside and renamed when complete; tensors and plain data only.

Layout of OUTPUT_DIR::

    checkpoints/step_0000100/   a complete checkpoint: files written by the task package through a
                                :class:`CheckpointWriter`, then ``checkpoint.json`` (the manifest), then renamed
    checkpoints/step_0000200.partial/   a checkpoint being written (or a save that was killed): never read, removed
                                by the next run in the folder

``checkpoints/`` is a folder of the run's own: a symbolic link there is refused (:func:`checkpoint_folder`), never
written or deleted through, and a run deletes in it only the folders it names itself (``step_N``, ``step_N.partial``,
``step_N.old``).

A checkpoint holds tensors and plain data only: ``torch.save`` files read back with ``weights_only=True``
(:func:`safe_load`), JSON and safetensors. A file that holds anything else (a pickled object or code) raises
:class:`CheckpointError` before anything in it runs. ``torch`` is imported inside the functions that read and write
tensors.

- :func:`atomic_checkpoint_dir` and :class:`CheckpointWriter`: write a checkpoint aside and rename it when complete.
- :func:`list_checkpoints`, :func:`latest_complete_checkpoint`, :func:`prune_checkpoints`,
  :func:`clean_partial_checkpoints`, :func:`resolve_checkpoint`, :func:`checkpoint_weights`: the complete checkpoints
  of a run; :func:`check_config_copy`: the run's config.json is the one its checkpoint was trained with.
- :func:`safe_load`, :func:`read_json`, :func:`load_checked`: read checkpoint files, nothing executable;
  :func:`load_weights`: a weights file into the model its config.json describes (names, shapes, finite values);
  :func:`save_states` / :func:`load_states`: the state dicts of optimizers, schedules and the like.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError
from .files import OutputError, _human, output_error, read_bytes

__all__ = [
    "CONFIG_COPY_FILE",
    "CONFIG_FILE",
    "CheckpointError",
    "check_config_copy",
    "CheckpointWriter",
    "atomic_checkpoint_dir",
    "checkpoint_folder",
    "checkpoint_path",
    "checkpoint_weights",
    "clean_partial_checkpoints",
    "is_complete",
    "latest_complete_checkpoint",
    "list_checkpoints",
    "load_checked",
    "load_states",
    "load_weights",
    "prune_checkpoints",
    "read_json",
    "resolve_checkpoint",
    "safe_load",
    "save_states",
]

CHECKPOINT_DIR = "checkpoints"
CONFIG_FILE = "config.json"
CONFIG_COPY_FILE = "run_config.json"  # a checkpoint's copy of the run's config.json
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "checkpoint.json"
PARTIAL_SUFFIX = ".partial"
_OLD_SUFFIX = ".old"
_CHECKPOINT_FORMAT = "deq-checkpoint-2"
_LEFTOVER = re.compile(rf"step_[0-9]{{7,}}({re.escape(PARTIAL_SUFFIX)}|{re.escape(_OLD_SUFFIX)})")  # a save's own


class CheckpointError(UsageError, ValueError):
    """A checkpoint that cannot be used: incomplete, or a file that is not tensors and plain data (one line)."""


def load_checked(path: str | Path, loader: Callable[[Path], Any]) -> Any:
    """``loader(path)``, with any failure (missing, truncated, or holding something that is not tensors and plain
    data) turned into one :class:`CheckpointError` naming the file. Use it for safetensors files."""
    path = Path(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete or not one of this project.")
    try:
        return loader(path)
    except CheckpointError:  # the loader's own one line, naming the file
        raise
    except Exception as err:  # torch, pickle, safetensors and json raise many types for a foreign file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path} cannot be read as tensors and plain data ({type(err).__name__}: {reason[:200]}); it was not "
            "written by this project's training, or it was modified. Nothing in it was run."
        ) from None


def load_weights(model: Any, path: str | Path, load: Callable[[], Any] | None = None) -> None:
    """Load the weights file ``path`` of a checkpoint or an export (safetensors) into ``model``, the model its
    config.json describes: with safetensors' ``load_model`` (which restores tied weights, stored once), or by
    ``load()`` when given (e.g. ``lambda: model.load_state_dict(tensors)`` for tensors already read from ``path``).
    Then every floating-point tensor of the model must be finite.

    Raises:
        CheckpointError: one line naming the file: it is missing or cannot be read as tensors; its tensors do not fit
            the model (other names or shapes: config.json or the file was changed after training); or a weight holds
            NaN or inf (the run diverged before the checkpoint was saved, or the file was damaged).
    """
    import torch
    from safetensors.torch import load_model

    def read(file: Path) -> None:
        try:
            load() if load is not None else load_model(model, str(file))
        except RuntimeError as err:  # what torch's load_state_dict raises for other names or shapes
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            if not lines or not lines[0].startswith("Error(s) in loading state_dict"):
                raise
            detail = lines[1][:200] if len(lines) > 1 else lines[0]
            raise CheckpointError(
                f"{file} does not fit the model that config.json describes ({detail}): config.json or this file was "
                "changed after training; restore them, so that both are the run's."
            ) from None

    path = Path(path)
    load_checked(path, read)
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"{path} holds NaN or inf in {name}: the run diverged before this checkpoint was saved, or the file "
                "was damaged; use an earlier checkpoint of the run (RUN/checkpoints/step_N; a resume takes the newest, "
                "so delete this one first), or train again."
            )


def safe_load(path: str | Path) -> Any:
    """A ``torch.save`` file read with ``torch.load(weights_only=True)`` onto the CPU: tensors, numbers, strings,
    lists, tuples and dicts only; a pickled object raises :class:`CheckpointError` without running anything."""
    import torch

    return load_checked(path, lambda p: torch.load(p, map_location="cpu", weights_only=True))


def read_json(path: str | Path) -> Any:
    """A JSON file of a checkpoint; anything else raises :class:`CheckpointError`."""
    return load_checked(path, lambda p: json.loads(p.read_text(encoding="utf-8")))


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
        return path

    def save_torch(self, name: str, obj: Any) -> Path:
        """``torch.save`` of tensors and plain data (read back with :func:`safe_load`)."""
        import torch

        def write(path: Path) -> None:
            with open(path, "xb") as fh:  # a new file (never through a link); a failed write keeps its errno
                torch.save(obj, fh)

        return self.save_with(name, write)

    def save_json(self, name: str, obj: Any) -> Path:
        """A JSON file (read back with :func:`read_json`)."""

        def write(path: Path) -> None:
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(json.dumps(obj, indent=1) + "\n")

        return self.save_with(name, write)


def _remove(path: Path) -> None:
    """Delete a file, a link (never what it points to) or a folder, ignoring errors."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def _folder_size(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:
        return 0


def _save_failure(output_dir: Path, final: Path, partial: Path, err: BaseException) -> UsageError | None:
    """The one-line error of a checkpoint save that failed with ``err`` (None: not a failure to write), naming the
    space a checkpoint needs (the size of the last complete one, or what was written before the device was full)."""
    previous = latest_complete_checkpoint(output_dir)
    if previous is not None:
        needed = f"about {_human(_folder_size(previous))}, the size of {previous.name}"
        fix = (
            f"the partial checkpoint was removed and {previous.name}, the last complete one, is kept: free space "
            "there, then run again with --resume"
        )
    else:
        written = _folder_size(partial) if partial.is_dir() else 0
        needed = f"more than {_human(written)}" if written else None
        fix = "the partial checkpoint was removed: free space there or choose another --output-dir"
    return output_error(partial, err, what=f"checkpoint {final.name}", needed=needed, full_fix=fix)


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
    output_dir = Path(output_dir)
    checkpoint_folder(output_dir)
    final = checkpoint_path(output_dir, step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    old = final.with_name(final.name + _OLD_SUFFIX)
    try:
        if main:
            _remove(partial)
            partial.mkdir(parents=True)
        sync()
        yield CheckpointWriter(partial)
        sync()
        if main:
            files = sorted(p.name for p in partial.iterdir())
            manifest = {"format": _CHECKPOINT_FORMAT, "step": step, "files": files}
            CheckpointWriter(partial).save_json(MANIFEST_FILE, manifest)
            _fsync(partial)
            if final.exists() or final.is_symlink():
                _remove(old)
                final.rename(old)
            partial.rename(final)
    except Exception as err:  # a kill leaves the partial folder to the next run; an error removes it
        failure = _save_failure(output_dir, final, partial, err) if main else None
        if main:
            _remove(partial)
            if old.exists() and not final.exists():
                with contextlib.suppress(OSError):
                    old.rename(final)  # the checkpoint this save was to replace
        if failure is None:
            raise
        raise failure from err
    if main:
        _fsync(final.parent)
        _remove(old)
    sync()


def checkpoint_folder(output_dir: str | Path) -> Path:
    """OUTPUT_DIR/checkpoints, checked before a run writes or deletes anything in it.

    Raises:
        OutputError: it is a symbolic link (the run would write its checkpoints, and delete old ones, in the folder
            it points to).
    """
    folder = Path(output_dir) / CHECKPOINT_DIR
    if folder.is_symlink():
        raise OutputError(
            f"{folder} is a symbolic link; a run writes and deletes its checkpoints only in a folder of its own, never "
            "through a link: replace the link with the folder it points to, or choose another --output-dir."
        )
    return folder


def checkpoint_path(output_dir: str | Path, step: int) -> Path:
    """OUTPUT_DIR/checkpoints/step_NNNNNNN (zero-padded so that names sort by step)."""
    return Path(output_dir) / CHECKPOINT_DIR / f"step_{step:07d}"


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` is a complete checkpoint: its manifest is a regular file of valid JSON (a FIFO there would
    block the reader: :func:`~deq_core.train.files.read_bytes`) and every file it lists exists."""
    try:
        manifest = json.loads(read_bytes(folder / MANIFEST_FILE).decode("utf-8"))
        return all((folder / name).is_file() for name in manifest["files"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        return False


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """The complete checkpoint folders of a run, oldest first (an empty list when there are none). Folders being
    written (``.partial``) and folders without a valid manifest (e.g. written in place by an older version and
    interrupted) are left out."""
    folder = Path(output_dir) / CHECKPOINT_DIR
    if not os.path.isdir(folder):
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name[5:].isdigit() and p.name.startswith("step_")
                  and is_complete(p))  # fmt: skip


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def clean_partial_checkpoints(output_dir: str | Path) -> list[Path]:
    """Delete the leftovers of interrupted saves (``step_N.partial`` / ``step_N.old``; no other name); returns what
    was deleted. Call it only while holding the run's :class:`RunLock`.

    Raises:
        OutputError: OUTPUT_DIR/checkpoints is a symbolic link (:func:`checkpoint_folder`).
    """
    folder = checkpoint_folder(output_dir)
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.iterdir() if _LEFTOVER.fullmatch(p.name))
    for path in stale:
        _remove(path)
    return stale


def prune_checkpoints(output_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints.

    Raises:
        ValueError: ``keep`` < 1 (the newest checkpoint is never deleted).
        OutputError: OUTPUT_DIR/checkpoints is a symbolic link (:func:`checkpoint_folder`).
    """
    if keep < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep}.")
    checkpoint_folder(output_dir)
    for old in list_checkpoints(output_dir)[:-keep]:
        _remove(old)


def resolve_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(run_dir, checkpoint_dir) from either a run directory (its newest complete checkpoint) or a complete
    checkpoint folder, whose run's config.json is the one the checkpoint was trained with (:func:`check_config_copy`).

    Raises:
        FileNotFoundError: neither, or a run directory without a complete checkpoint.
        CheckpointError: (a ValueError) a checkpoint folder that is incomplete, or a config.json changed since.
    """
    path = Path(path)
    if os.path.isfile(path / CONFIG_FILE):  # os.path: False for a name the system cannot take, too
        latest = latest_complete_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no complete checkpoint under {path / CHECKPOINT_DIR}.")
        check_config_copy(path, latest)
        return path, latest
    if ".." in path.parts or not path.name:  # RUN/checkpoints/step_N/../step_N, or ".": as the system reads it
        path = Path(os.path.realpath(path))
    run_dir = path.parent.parent
    if not os.path.isfile(run_dir / CONFIG_FILE) or not os.path.isdir(path):
        raise FileNotFoundError(
            f"{path} is neither a run directory (with {CONFIG_FILE}) nor a checkpoint folder inside one "
            f"(RUN/{CHECKPOINT_DIR}/step_N)."
        )
    if not is_complete(path):
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no valid {MANIFEST_FILE}: the save was interrupted); pass the run "
            f"directory {run_dir} to use its newest complete checkpoint."
        )
    check_config_copy(run_dir, path)
    return run_dir, path


def _changed(saved: Any, found: Any, prefix: str = "") -> list[str]:
    """The dotted names whose values differ between two JSON values, as ``name: saved -> found``."""
    if isinstance(saved, dict) and isinstance(found, dict):
        return [change for key in sorted({*saved, *found}, key=str)
                for change in _changed(saved.get(key), found.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if saved == found else [f"{prefix.rstrip('.')}: {saved!r} -> {found!r}"]


def check_config_copy(run_dir: str | Path, folder: str | Path) -> None:
    """Check that ``run_dir/config.json`` holds the settings that the checkpoint ``folder`` keeps a copy of
    (``run_config.json``, written with every checkpoint): a resume, an evaluation or an export then uses the settings
    the weights were trained with. Only the ``resumed`` list may differ (a later resume adds to it). Nothing to check
    when either file is missing (a checkpoint of an earlier version; a deleted config.json, restored from the copy on
    resume).

    Raises:
        CheckpointError: a file is not JSON, or a setting differs (one line naming the first three).
    """
    config, copy = Path(run_dir) / CONFIG_FILE, Path(folder) / CONFIG_COPY_FILE
    if not (config.is_file() and copy.is_file()):
        return
    saved, found = read_json(copy), read_json(config)
    if not (isinstance(saved, dict) and isinstance(found, dict)):
        changes = [f"{CONFIG_FILE}: {type(saved).__name__} -> {type(found).__name__}"]
    else:
        changes = _changed({k: v for k, v in saved.items() if k != "resumed"},
                           {k: v for k, v in found.items() if k != "resumed"})  # fmt: skip
    if changes:
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise CheckpointError(
            f"{config} differs from {copy}, the copy saved with the checkpoint ({'; '.join(changes[:3])}{more}): one "
            "of them was changed after training; give both the run's settings again (copy one over the other), or "
            "train a new run in another --output-dir."
        )


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
    """Restore what :func:`save_states` wrote: ``obj.load_state_dict(safe_load(folder / NAME.pt))``.

    Raises:
        CheckpointError: one line naming the file: it is missing, is not tensors and plain data, or holds a state
            that ``obj`` refuses (tensors saved by something else: the file was replaced).
    """
    for name, obj in objects.items():
        load_checked(Path(folder) / f"{name}.pt", lambda path, obj=obj: obj.load_state_dict(safe_load(path)))
