"""Fault injection for the tests of training scripts (of deq-core, of the task packages, of a user's own task;
nothing in the training code calls it or knows of it).

``python -m deq_core.train.testing.faults KILL_AT MODULE [ARGS...]`` runs ``python -m MODULE ARGS...`` and kills its
own process with SIGKILL at the KILL_AT-th save point: right after each call of ``os.fsync``, ``os.rename`` or
``os.replace`` on a file or folder under OUTPUT_DIR/checkpoints (OUTPUT_DIR from ``--output-dir`` in ARGS), which this
wrapper replaces in the process before the module runs (:func:`save_points`). A checkpoint save flushes each of its
files, then its folder, renames the folder and flushes the folder of checkpoints: every state a kill can leave is one
of these points. KILL_AT = 0 never kills.

:func:`train_with_faults` runs a training command again and again, killing it at chosen save points or at random
moments of training, resuming each time, until it finishes. :func:`plant_pickle` replaces a file with a pickle that
runs code when unpickled by a loader that allows it (to show that no loader of a checkpoint does).
:func:`read_only` makes a folder unwritable for the test's own process, also when it runs as root; :func:`no_space`
makes a save point fail as a full device does. :func:`check_export_fault` checks a task package's export against a
destination that cannot be used (:data:`EXPORT_FAULTS`); :func:`check_run_folder_fault` checks a training command
line against a run folder made unusable (:data:`RUN_FOLDER_FAULTS`).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import checkpoints
from ..rundir import RunLock

__all__ = [
    "EXPORT_FAULTS",
    "RUN_FOLDER_FAULTS",
    "WEIGHT_FAULTS",
    "PAYLOAD_MODULE",
    "TRUSTED_SOLVER_MODULE",
    "Kill",
    "check_export_fault",
    "check_export_trust",
    "check_installed_solver_module",
    "check_run_folder_fault",
    "damage_weights",
    "edit_saved_config",
    "plant_pickle",
    "plant_solver_path",
    "python_module",
    "random_kills",
    "no_space",
    "read_only",
    "save_points",
    "set_saved_setting",
    "train_with_faults",
]

_SAVE_CALLS = ("fsync", "rename", "replace")  # the calls of the os module that end a step of a checkpoint save


def _fd_path(fd: Any) -> str:
    """The path of an open file descriptor (Linux: /proc/self/fd), or "" when unknown."""
    try:
        return os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    except (OSError, AttributeError, ValueError):
        return ""


def _under(path: Any, folder: str) -> bool:
    """Whether ``path`` is ``folder`` (a real path) or inside it."""
    try:
        real = os.path.realpath(os.fsdecode(path)) if path else ""
    except TypeError:  # a file descriptor
        return False
    return real == folder or real.startswith(os.path.join(folder, ""))


@contextlib.contextmanager
def save_points(folder: str | Path, point: Callable[[str, str], None]) -> Iterator[None]:
    """Call ``point(call, path)`` right after each ``os.fsync`` / ``os.rename`` / ``os.replace`` on a path under
    ``folder`` while the block runs (``call`` is the function's name, ``path`` the file, or the source of a rename):
    the moments between the steps of a checkpoint save, where a test raises or kills the process. ``point`` may
    raise; the call it follows is done."""
    root = os.path.realpath(folder)
    saved = {name: getattr(os, name) for name in _SAVE_CALLS}

    def watch(name: str) -> Callable[..., Any]:
        call = saved[name]

        def watched(*args: Any, **kwargs: Any) -> Any:
            result = call(*args, **kwargs)
            path = _fd_path(args[0]) if name == "fsync" else os.fspath(args[0])
            if _under(path, root) or (len(args) > 1 and name != "fsync" and _under(args[1], root)):
                point(name, path)
            return result

        return watched

    try:
        for name in _SAVE_CALLS:
            setattr(os, name, watch(name))
        yield
    finally:
        for name, call in saved.items():
            setattr(os, name, call)


def _kill_at(kill_at: int) -> Callable[[str, str], None]:
    count = 0

    def point(call: str, path: str) -> None:
        nonlocal count
        count += 1
        if count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    return point


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    kill_at, module, rest = int(args[0]), args[1], args[2:]
    output_dir = rest[rest.index("--output-dir") + 1] if "--output-dir" in rest else "."
    sys.argv = [module, *rest]
    with contextlib.ExitStack() as stack:
        if kill_at > 0:
            stack.enter_context(save_points(Path(output_dir) / checkpoints.CHECKPOINT_DIR, _kill_at(kill_at)))
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


# How :func:`damage_weights` changes a checkpoint's weights.
WEIGHT_FAULTS = ("other shapes", "nan")


def damage_weights(run: Path, fault: str) -> Path:
    """Rewrite the ``model.safetensors`` of the newest complete checkpoint of ``run`` (its manifest still valid):
    ``fault`` "other shapes" makes its first tensor one larger in every dimension (a file of another model), "nan"
    puts a NaN in its first floating-point tensor (a run that diverged). Returns the file."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = checkpoints.latest_complete_checkpoint(run)
    assert folder is not None, f"{run} has no complete checkpoint"
    path = folder / checkpoints.WEIGHTS_FILE
    tensors = load_file(str(path))
    if fault == "other shapes":
        name = sorted(tensors)[0]
        tensors[name] = torch.zeros([size + 1 for size in tensors[name].shape], dtype=tensors[name].dtype)
    elif fault == "nan":
        name = sorted(k for k, t in tensors.items() if t.is_floating_point())[0]
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[0] = float("nan")
    else:
        raise ValueError(f"unknown weight fault {fault!r}; one of {WEIGHT_FAULTS}")
    save_file(tensors, str(path))
    return path


def edit_saved_config(run: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to what ``run/config.json`` holds and to the copy of it each checkpoint keeps
    (``run_config.json``), as a user (or a hostile run folder) changing the run's settings everywhere they are kept
    would. Changing config.json alone is refused before anything reads it (``checkpoints.check_config_copy``)."""
    copies = [folder / checkpoints.CONFIG_COPY_FILE for folder in checkpoints.list_checkpoints(run)]
    for path in [run / checkpoints.CONFIG_FILE, *(p for p in copies if p.is_file())]:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data, indent=2))


def set_saved_setting(run: Path, key: str, value: Any) -> None:
    """Change the setting ``key`` (dotted, ``model.width``) of the config the run saved (config.json and the copies
    of its checkpoints: :func:`edit_saved_config`)."""
    *sections, name = key.split(".")

    def edit(data: dict[str, Any]) -> None:
        node = data["config"]
        for section in sections:
            node = node[section]
        node[name] = value

    edit_saved_config(run, edit)


# A module a test plants in a run folder: imported, it writes "ran" beside itself (what must never happen).
PAYLOAD_MODULE = """from pathlib import Path

Path(__file__).with_name("ran").write_text("payload.py was imported")


class Evil:
    pass
"""
# A user's own solver module (``Relaxed``): imported, it writes "imported" beside itself (allowed with --trust-solver).
TRUSTED_SOLVER_MODULE = """import dataclasses
from pathlib import Path

import deq_core

Path(__file__).with_name("imported").write_text("my_solvers.py was imported")


@dataclasses.dataclass(frozen=True)
class Relaxed(deq_core.Solver):
    damping: float = 0.9

    def init(self, z, fz, g, loop):
        return None

    def step(self, state, z, fz, g, loop):
        return deq_core.Step(z + self.damping * g, state, temporary=True)
"""


def plant_solver_path(run_dir: Path, field: str, solver: str = "payload:Evil") -> None:
    """Write :data:`PAYLOAD_MODULE` as ``run_dir/payload.py`` and name ``solver`` (an import path) as the run's
    ``deq.<field>`` in its config.json and the checkpoints' copies (``field``: "solver" or "backward_solver")."""
    (run_dir / "payload.py").write_text(PAYLOAD_MODULE)
    set_saved_setting(run_dir, f"deq.{field}", solver)


def python_module(
    module: str, *args: str, cwd: Path, timeout: float = 300, pythonpath: Sequence[Path] = ()
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in a fresh process run in ``cwd`` (which Python puts first on sys.path), one thread,
    no warnings or progress bars, with the folders ``pythonpath`` put before those of PYTHONPATH; returns the completed
    process (not checked)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "TQDM_DISABLE": "1"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def check_export_trust(module: str, cwd: Path) -> None:
    """Check ``python -m MODULE run exported`` (a task package's export) in ``cwd``, which holds my_solvers.py
    (:data:`TRUSTED_SOLVER_MODULE`, its "imported" marker removed) and ``run``, a run whose config names a solver of
    it: refused in one line naming ``--trust-solver my_solvers``, nothing imported or written; then, with that
    option, exported (model.safetensors written, the module imported).

    Raises:
        AssertionError: either export did otherwise.
    """
    done = python_module(module, "run", "exported", cwd=cwd)
    assert done.returncode == 2 and not (cwd / "exported").exists(), done
    assert done.stderr.strip().endswith("add --trust-solver my_solvers."), done.stderr
    assert not (cwd / "imported").exists()
    done = python_module(module, "run", "exported", "--trust-solver", "my_solvers", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert (cwd / "exported" / "model.safetensors").is_file() and (cwd / "imported").exists()


def check_installed_solver_module(command: Sequence[str], run: Path, site: Path) -> None:
    """Check ``python -m COMMAND --trust-solver my_solvers`` (evaluate or resume ``run``, whose config names the
    solver ``my_solvers:Relaxed``) run in the run folder ``run``, which holds a my_solvers.py of its own
    (:data:`PAYLOAD_MODULE`): with my_solvers installed in ``site`` (:data:`TRUSTED_SOLVER_MODULE`, on PYTHONPATH) it
    exits 0, having imported that one; with none installed, the run folder's is refused in one line. The run folder's
    file is never imported.

    Raises:
        AssertionError: either command did otherwise.
    """
    (run / "my_solvers.py").write_text(PAYLOAD_MODULE)
    (site / "my_solvers.py").write_text(TRUSTED_SOLVER_MODULE)
    argv = [*command, "--trust-solver", "my_solvers"]
    done = python_module(*argv, cwd=run, pythonpath=[site])
    assert done.returncode == 0, done.stderr
    assert (site / "imported").exists() and not (run / "ran").exists()
    (site / "my_solvers.py").unlink()
    done = python_module(*argv, cwd=run, pythonpath=[site])
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"python -m {command[0]}: error: "), line
    assert "--trust-solver my_solvers: the module 'my_solvers' is " in line, line
    assert line.endswith("install it, or put it on PYTHONPATH outside the run folder."), line
    assert not (run / "ran").exists()


# The faults of an export's destination OUT that :func:`check_export_fault` makes.
EXPORT_FAULTS = ("read-only folder", "full device", "planted OUT.partial link", "dangling OUT link",
                 "someone else's OUT.partial")  # fmt: skip


def no_space(fragment: str) -> Callable[[str, str], None]:
    """A save point (:func:`save_points`) that fails the first ``os.fsync`` of a path containing ``fragment`` with
    ENOSPC, as a device that fills up while the file is written."""

    def point(call: str, path: str) -> None:
        if call == "fsync" and fragment in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return point


def check_export_fault(
    fault: str, export: Callable[[list[str]], int], run: Path, root: Path, stderr: Callable[[], str]
) -> None:
    """Check a task package's export command line, ``export([RUN, OUT])`` (its ``main``, run in this process), with
    the destination ``root/out`` made unusable by ``fault`` (one of :data:`EXPORT_FAULTS`): a folder that cannot be
    written, a device that fills up while the weights are written, a symbolic link planted at ``OUT.partial`` (where
    the export writes before renaming), a dangling link at OUT, or a folder of the user's own at ``OUT.partial``. Each
    is one line ``PROG: error: ...`` on stderr (read with ``stderr()``), exit status 2; what the export created is
    removed, and the folder a link points to, or the user's, is left as it was.

    Raises:
        AssertionError: the export did otherwise.
    """
    root.mkdir(parents=True)
    out, partial, elsewhere = root / "out", root / "out.partial", root.parent / f"{root.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the export's")
    context: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if fault == "read-only folder":
        context, expected = read_only(root), f"cannot write to {root}: "
    elif fault == "full device":
        context, expected = save_points(root, no_space(partial.name)), f"no space left on the device of {root} "
    elif fault == "planted OUT.partial link":
        partial.symlink_to(elsewhere)
        expected = f"{partial} is a symbolic link"
    elif fault == "dangling OUT link":
        out.symlink_to(root / "missing")
        expected = f"{out} is a symbolic link"
    elif fault == "someone else's OUT.partial":
        partial.mkdir()
        (partial / "notes.txt").write_text("the user's own")
        expected = f"{partial} exists and was not left by an interrupted export"
    else:
        raise ValueError(f"unknown export fault {fault!r}; one of {EXPORT_FAULTS}")
    before = sorted(p.name for p in root.iterdir())
    with context:
        code = export([str(run), str(out)])
    err = stderr()
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("python -m ") and ": error: " in line and expected in line, line
    assert sorted(p.name for p in root.iterdir()) == before  # no OUT, no OUT.partial of the export's own
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]
    if fault == "someone else's OUT.partial":
        assert [p.name for p in partial.iterdir()] == ["notes.txt"]


# The faults of a stopped run's folder that :func:`check_run_folder_fault` makes.
RUN_FOLDER_FAULTS = ("hard link at .lock", "checkpoints link", "trackers link", "trackers/PROJECT link",
                     ".lock deleted while training", "metrics deleted", "metrics emptied", "metrics folder",
                     "train_state step", "config deleted")  # fmt: skip


def _files(folder: Path) -> dict[str, bytes]:
    """The regular files under ``folder`` but ``.lock`` (whose process id a refused run may rewrite), by path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.name != ".lock"}  # fmt: skip


def check_run_folder_fault(
    fault: str, train: Callable[[list[str]], int], stopped: Path, root: Path, stderr: Callable[[], str]
) -> None:
    """Check a task package's training command line, ``train(ARGV)`` (its ``main`` with the preset and data options
    before ARGV, run in this process; ARGV starts with its ``key=value`` settings, so that those options must end with
    the caller's settings), against a copy RUN = ``root/run`` of ``stopped`` (a stopped run with a complete
    checkpoint, left as it is) made unusable by ``fault`` (one of :data:`RUN_FOLDER_FAULTS`):

    - a hard link at ``.lock`` to a file outside, or a symbolic link at ``checkpoints/`` to a folder outside holding
      ``*.partial`` and ``*.old`` entries: the resume writes and deletes nothing there;
    - a symbolic link at ``trackers/`` or at ``trackers/PROJECT`` of a new run with TensorBoard (``run.project=tiny``):
      nothing is written where it points;
    - ``.lock`` deleted while a run holds the lock (this process, :class:`~deq_core.train.rundir.RunLock`): no
      second run;
    - ``metrics.jsonl`` deleted, emptied or replaced by a folder, the step of ``train_state.json`` edited: a resume
      that would lose or misplace lines without a word;
    - ``config.json`` deleted, then a resume with another ``optim.lr``: refused, and ``config.json`` restored from the
      checkpoint's copy.

    Each is one line ``PROG: error: ...`` on stderr (read with ``stderr()``, which this calls once first to drop
    earlier output), exit status 2; the files of RUN are left as they were (but ``config.json``, restored) and what
    lies outside it (in ``root``) is untouched.

    Raises:
        AssertionError: the command did otherwise.
    """
    run = root / "run"
    shutil.copytree(stopped, run)
    outside, elsewhere = root / "outside.txt", root / "elsewhere"
    outside.write_text("not the run's\n")
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the run's")
    argv, log = ["--output-dir", str(run), "--resume"], run / "metrics.jsonl"
    context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if fault == "hard link at .lock":
        (run / ".lock").unlink()
        os.link(outside, run / ".lock")
        expected = f"{run / '.lock'} is a hard link"
    elif fault == "checkpoints link":
        (run / "checkpoints").rename(elsewhere / "checkpoints")
        (run / "checkpoints").symlink_to(elsewhere / "checkpoints", target_is_directory=True)
        for name in ("notes.partial", "step_0000001.old"):  # a user's folder, and one a run's clean-up deletes
            (elsewhere / "checkpoints" / name).mkdir()
        expected = f"{run / 'checkpoints'} is a symbolic link"
    elif fault in ("trackers link", "trackers/PROJECT link"):
        run = root / "new"
        link = run / ("trackers" if fault == "trackers link" else "trackers/tiny")
        link.parent.mkdir(parents=True)
        link.symlink_to(elsewhere, target_is_directory=True)
        argv, expected = ["run.log_with=tensorboard", "run.project=tiny", "--output-dir", str(run)], f"{link} is a sym"
    elif fault == ".lock deleted while training":
        context, expected = RunLock(run), f"{run} is in use by another training run"
    elif fault in ("metrics deleted", "metrics emptied", "metrics folder"):
        latest = checkpoints.latest_complete_checkpoint(run)
        assert latest is not None, f"{run} holds no complete checkpoint"
        lines = json.loads((latest / "train_state.json").read_text())["metrics_lines"]
        log.unlink()
        if fault == "metrics emptied":
            log.write_bytes(b"")
        elif fault == "metrics folder":
            log.mkdir()
            (log / "notes.txt").write_text("a user's file")
        found = {"metrics deleted": "does not exist, but the checkpoint to resume from counted",
                 "metrics emptied": "has 0 complete line(s), but the checkpoint to resume from counted",
                 "metrics folder": "is not a regular file (a folder, "}[fault]  # fmt: skip
        expected = f"{log} {found}" + (f" {lines} lines" if fault != "metrics folder" else "")
    elif fault == "train_state step":
        latest = checkpoints.latest_complete_checkpoint(run)
        assert latest is not None, f"{run} holds no complete checkpoint"
        state = latest / "train_state.json"
        saved = json.loads(state.read_text())
        state.write_text(json.dumps({**saved, "step": saved["step"] - 1}))
        expected = f"{state} says step {saved['step'] - 1}, but the checkpoint's checkpoint.json says step"
    elif fault == "config deleted":
        (run / "config.json").unlink()
        argv, expected = ["optim.lr=0.123", *argv], "--resume with a different config"
    else:
        raise ValueError(f"unknown run folder fault {fault!r}; one of {RUN_FOLDER_FAULTS}")
    before = _files(run) if run.exists() else {}
    stderr()
    with context:
        if fault == ".lock deleted while training":
            (run / ".lock").unlink()
        code = train(argv)
    err = stderr()
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert ": error: " in line and expected in line, line
    after = _files(run) if run.exists() else {}
    if fault == "config deleted":
        assert "-> 0.123" in line, line
        after.pop("config.json")  # restored from the checkpoint's copy, and the settings checked against it
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    assert outside.read_text() == "not the run's\n"
    kept = sorted(p.name for p in elsewhere.iterdir())
    assert kept == (["checkpoints", "keep.txt"] if fault == "checkpoints link" else ["keep.txt"]), kept
    if fault == "checkpoints link":
        assert {"notes.partial", "step_0000001.old"} <= {p.name for p in (elsewhere / "checkpoints").iterdir()}


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@contextlib.contextmanager
def read_only(folder: str | Path) -> Iterator[None]:
    """Make ``folder`` (which must exist) unwritable while the block runs, as a read-only folder or file system is:
    its mode is 0o555; when that does not stop this process (root, whom file modes do not stop), every write this
    process tries under it (``os.open`` / ``open`` for writing, ``os.mkdir``, renames, deletions) also fails with
    EROFS. Restores both at the end."""
    folder = Path(folder)
    mode = folder.stat().st_mode & 0o7777
    folder.chmod(0o555)
    probe = folder / ".read_only_probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except PermissionError:
        stopped = True
    else:
        probe.unlink()
        stopped = False
    try:
        with contextlib.ExitStack() as stack:
            if not stopped:
                stack.enter_context(_refuse_writes(folder))
            yield
    finally:
        folder.chmod(mode)


@contextlib.contextmanager
def _refuse_writes(folder: Path) -> Iterator[None]:
    root = os.path.join(os.path.realpath(folder), "")
    saved = {"open": os.open, "mkdir": os.mkdir, "rename": os.rename, "replace": os.replace, "unlink": os.unlink,
             "remove": os.remove, "rmdir": os.rmdir}  # fmt: skip
    builtin_open, io_open = builtins.open, io.open

    def refuse(path: Any) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def inside(path: Any) -> bool:
        return isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)).startswith(root)

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _WRITE_FLAGS and inside(path) and "dir_fd" not in kwargs:
            raise refuse(path)
        return saved["open"](path, flags, *args, **kwargs)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path) and "dir_fd" not in kwargs:
            if os.path.exists(path):  # as the system answers: the folder exists before it is read-only
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            raise refuse(path)
        saved["mkdir"](path, *args, **kwargs)

    def two_paths(name: str) -> Callable[..., None]:
        def call(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if inside(src) or inside(dst):
                raise refuse(dst)
            saved[name](src, dst, *args, **kwargs)

        return call

    def one_path(name: str) -> Callable[..., None]:
        def call(path: Any, *args: Any, **kwargs: Any) -> None:
            if inside(path) and "dir_fd" not in kwargs:
                raise refuse(path)
            saved[name](path, *args, **kwargs)

        return call

    def file_open(opener: Callable[..., Any]) -> Callable[..., Any]:
        def call(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(c in mode for c in "wax+") and inside(file):
                raise refuse(file)
            return opener(file, mode, *args, **kwargs)

        return call

    replaced: dict[str, Any] = {"open": os_open, "mkdir": mkdir, "rename": two_paths("rename"),
                                "replace": two_paths("replace"), "unlink": one_path("unlink"),
                                "remove": one_path("remove"), "rmdir": one_path("rmdir")}  # fmt: skip
    try:
        for name, call in replaced.items():
            setattr(os, name, call)
        builtins.open, io.open = file_open(builtin_open), file_open(io_open)
        yield
    finally:
        for name, call in saved.items():
            setattr(os, name, call)
        builtins.open, io.open = builtin_open, io_open


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
    """Run ``command`` (a ``python -m deq_core.train.testing.faults ...`` line) once; returns its exit code (-9 when
    killed)."""
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
        # this module as the wrapper (main): python -m deq_core.train.testing.faults KILL_AT MODULE ...
        command = [sys.executable, "-m", __name__, point, module, *args, "--output-dir", str(output_dir)]
        codes.append(_attempt([*command, *resume], kill, metrics, env, timeout))
        if codes[-1] == 0:
            break
    return codes


if __name__ == "__main__":
    main()
