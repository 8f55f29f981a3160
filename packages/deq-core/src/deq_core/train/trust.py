"""Import paths in a config read from a file. A task config may name a user's solver by import path
(``deq.solver="pkg.module:Class"``, a field made with :func:`import_path_field`), and building the config imports that
module. A run folder is data that may come from anyone, and ``python -m`` puts the working directory on ``sys.path``,
so a config read from a file (a run's ``config.json``) imports no module the user did not allow: before anything is
built, :func:`check_import_paths` refuses every import path whose module is not among the trusted ones
(``--trust-solver MODULE`` on the command line, ``trusted_modules`` in Python). The built-in solvers' shorthands
("anderson", "broyden", "fixed_point") import nothing and are always read. A config built from the command line
(``deq.solver=pkg.module:Class`` for a new run) is the user's own choice and is not checked here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from .._solvers.resolve import import_path_module
from .errors import UsageError

__all__ = [
    "UntrustedImportError",
    "check_import_paths",
    "import_path_field",
    "import_path_fields",
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
) -> None:
    """Refuse ``values`` (the fields of the dataclass ``cls`` as read from a file, not yet built) when one of its
    import-path fields names a module outside ``trusted_modules``; nothing is imported. ``prefix`` names the section
    in the message (``"deq."``); ``fix`` is what the message tells the user to do (default: the command-line option
    that allows the module; a Python API that takes no such option says what to pass instead).

    Raises:
        UntrustedImportError: naming the field, the import path and the fix.
    """
    for name in import_path_fields(cls):
        value = values.get(name)
        module = import_path_module(value)
        if module is not None and module not in trusted_modules:
            advice = fix or f"if you trust the module {module!r}, add {TRUST_OPTION} {module}"
            raise UntrustedImportError(
                f"{prefix}{name} is the import path {value!r}, and a saved config imports no module the command line "
                f"does not allow; {advice}."
            )
