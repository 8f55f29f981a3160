"""Import paths in a config read from a file. A task config may name a user's solver by import path
(``deq.solver="pkg.module:Class"``, a field made with :func:`import_path_field`), and building the config imports that
module. A run folder is data that may come from anyone, and ``python -m`` puts the working directory on ``sys.path``,
so a config read from a file (a run's ``config.json``) imports no module the user did not allow: before anything is
built, :func:`check_import_paths` refuses every import path whose module is not among the trusted ones
(``--trust-solver MODULE`` on the command line, ``trusted_modules`` in Python). The built-in solvers' shorthands
(:data:`deq_core.BUILTIN_SOLVERS`) import nothing and are always read. A config built from the command line
(``deq.solver=pkg.module:Class`` for a new run) is the user's own choice and is not checked here.

A trusted name is the module installed in the environment, never a file of the run folder: a run folder holding a
``my_solvers.py`` would shadow the installed ``my_solvers`` when it is the working directory. :func:`import_trusted`
imports the trusted modules with the run folder left out of ``sys.path`` before anything else imports them (the
command lines do so first), and refuses a module found only there.

No other module is read from a run folder either: :func:`leave_run_folder` (called by :func:`import_trusted`, so by
every command line and every config read from a run folder) takes the run folder off ``sys.path`` for the rest of the
process, so that a module imported late (matplotlib, for the plot at the end of training) is never a file planted
there. What Python imports at startup, before any of this code runs (a ``torch.py`` in the working directory, a
``sitecustomize.py`` on PYTHONPATH), cannot be stopped here: run the tools from outside a run folder you did not
make, or through their console scripts (``deq-toy-train``, ...) or ``python -P``, which leave the working directory
off ``sys.path``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import os
import site
import sys
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from .._solvers.resolve import import_path_module
from .errors import UsageError

__all__ = [
    "UntrustedImportError",
    "check_import_paths",
    "import_path_field",
    "import_trusted",
    "import_path_fields",
    "leave_run_folder",
]

IMPORT_PATH = "deq_core.import_path"  # the metadata key of a field that may hold an import path
TRUST_OPTION = "--trust-solver"  # the command-line option that allows a module (deq_core.train.cli.add_trust_option)


class UntrustedImportError(UsageError, ValueError):
    """A config read from a file names an import path whose module the user did not allow (a user error: the
    message names the path and the option that allows it)."""


def import_path_field(default: str) -> Any:
    """A dataclass field with ``default`` whose value may be an import path ``"pkg.module:Class"`` (checked by
    :func:`check_import_paths` when a config is read from a file)."""
    return dataclasses.field(default=default, metadata={IMPORT_PATH: True})


def import_path_fields(cls: type) -> tuple[str, ...]:
    """The names of the fields of the dataclass ``cls`` made with :func:`import_path_field`."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(IMPORT_PATH))


def check_import_paths(
    cls: type, values: Mapping[str, Any], trusted_modules: Collection[str], prefix: str = "", fix: str | None = None
) -> list[str]:
    """Refuse ``values`` (the fields of the dataclass ``cls`` as read from a file, not yet built) when one of its
    import-path fields names a module outside ``trusted_modules``; nothing is imported. ``prefix`` names the section
    in the message (``"deq."``); ``fix`` is what the message tells the user to do (default: the command-line option
    that allows the module; a Python API that takes no such option says what to pass instead). Returns the modules
    the import paths name (all of them trusted).

    Raises:
        UntrustedImportError: naming the field, the import path and the fix.
    """
    named = []
    for name in import_path_fields(cls):
        value = values.get(name)
        module = import_path_module(value)
        if module is not None and module not in trusted_modules:
            advice = fix or f"if you trust the module {module!r}, add {TRUST_OPTION} {module}"
            raise UntrustedImportError(
                f"{prefix}{name} is the import path {value!r}, and a saved config imports no module the command line "
                f"does not allow; {advice}."
            )
        if module is not None:
            named.append(module)
    return named


def _inside(entry: object, folder: Path) -> bool:
    """Whether the ``sys.path`` entry ``entry`` ("" is the working directory) is ``folder`` or inside it."""
    where = Path(os.path.realpath(str(entry) or os.getcwd()))
    return where == folder or folder in where.parents


def _environment(folder: Path) -> list[Path]:
    """The folders of the Python environment itself (its prefixes and the user's site-packages) that lie inside the
    run folder ``folder``: a ``sys.path`` entry in one of them is an installed package's, the user's environment kept
    in the folder. An environment that holds the run folder (a run written under the virtual environment's folder)
    keeps nothing: the run folder's own entries are still the run's."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, site.getuserbase()}
    return [env for env in (Path(os.path.realpath(p)) for p in prefixes if p) if folder in env.parents]


def leave_run_folder(run_dir: str | Path) -> list[str]:
    """Take the run folder ``run_dir`` off ``sys.path`` for the rest of the process: every entry at or inside it
    (the working directory that ``python -m`` puts first, a PYTHONPATH entry) but those of the environment itself (a
    virtual environment kept in the folder). A module imported later (matplotlib, for a plot) is then never a file
    planted in the run folder. Returns the entries removed.

    Modules imported before this call are not affected: call it first (the command lines do).
    """
    folder = Path(os.path.realpath(run_dir))
    environment = _environment(folder)
    removed = [entry for entry in sys.path if _inside(entry, folder)
               and not any(_inside(entry, env) for env in environment)]  # fmt: skip
    if removed:
        sys.path[:] = [entry for entry in sys.path if entry not in removed]
    return removed


def _files(module: Any) -> list[str]:
    """Where the module ``module`` was read from: its file, or a package's folders."""
    file = getattr(module, "__file__", None)
    return [file] if file else [str(p) for p in getattr(module, "__path__", [])]


def import_trusted(modules: Iterable[str], run_dir: str | Path) -> None:
    """Take the run folder ``run_dir`` off ``sys.path`` (:func:`leave_run_folder`), then import each of ``modules``
    (trusted ones) as the environment has it, never from the run folder: searched without any ``sys.path`` entry at or
    inside ``run_dir``. A later import of the name (building a config that names it) gets the module imported here.
    A module found nowhere else, or failing to import, is left to that import, which says why.

    Raises:
        UntrustedImportError: the only module of that name is in the run folder, or the one imported already was
            read from there.
    """
    folder = Path(os.path.realpath(run_dir))
    removed = leave_run_folder(run_dir)
    for name in modules:
        top = name.partition(".")[0]
        if top not in sys.modules:
            kept = sys.path[:]
            sys.path[:] = [entry for entry in kept if not _inside(entry, folder)]  # for this import only
            try:
                importlib.import_module(name)
            except ImportError:
                pass
            finally:
                sys.path[:] = kept
        if top in sys.modules:
            planted = [file for file in _files(sys.modules[top]) if _inside(file, folder)]
        else:  # found nowhere else: is it in the run folder? (looked up, not run)
            inside = [str(folder), *removed, *(e for e in sys.path if _inside(e, folder))]
            spec = importlib.machinery.PathFinder.find_spec(top, inside)
            planted = [] if spec is None else [spec.origin or ", ".join(spec.submodule_search_locations or [])]
        if planted:
            raise UntrustedImportError(
                f"{TRUST_OPTION} {name}: the module {top!r} is {planted[0]}, inside the run folder {folder}, and a "
                "trusted module is the one installed in the environment, never a file of a run folder; install it, "
                "or put it on PYTHONPATH outside the run folder."
            )
