"""Which public names a package's README leaves out: :func:`undocumented_names`, behind each package's
``tests/test_readme_api.py``; which public modules define no ``__all__``: :func:`modules_without_all`.

A package's public names are the entries of ``__all__`` of the package and of every submodule whose dotted path has
no part starting with ``_`` (``deq_core._solvers`` is private, so its ``__all__`` is not public API). A name counts as
documented when the README contains it as a whole word (``build_task`` is found in ``deq_toy.tasks.build_task(...)``
but not in ``build_tasks``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

__all__ = ["modules_without_all", "public_names", "undocumented_names"]


def _public_modules(package: ModuleType) -> list[ModuleType]:
    """The package itself and every submodule with no private part in its dotted path, imported, sorted by name."""
    modules = [package]
    paths = getattr(package, "__path__", None)
    if paths is None:
        return modules
    for info in pkgutil.walk_packages(paths, prefix=package.__name__ + "."):
        parts = info.name.split(".")[1:]
        if any(part.startswith("_") for part in parts):
            continue
        modules.append(importlib.import_module(info.name))
    return sorted(modules, key=lambda module: module.__name__)


def public_names(package_name: str) -> dict[str, list[str]]:
    """The ``__all__`` entries of the package ``package_name`` and of its public submodules.

    Returns a dict from module name (``"deq_toy.data"``) to its ``__all__`` as a list, for each module that defines
    one. Imports every public submodule; a submodule that fails to import raises its import error.
    """
    package = importlib.import_module(package_name)
    names: dict[str, list[str]] = {}
    for module in _public_modules(package):
        exported = getattr(module, "__all__", None)
        if exported is not None:
            names[module.__name__] = [str(name) for name in exported]
    return names


def undocumented_names(package_name: str, readme_text: str) -> list[str]:
    """The public names of ``package_name`` (see :func:`public_names`) that ``readme_text`` does not contain as a
    whole word, each as ``"module.name"``, sorted; empty when the README names them all.
    """
    missing = []
    for module_name, names in public_names(package_name).items():
        for name in names:
            if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", readme_text) is None:
                missing.append(f"{module_name}.{name}")
    return sorted(missing)


def modules_without_all(package_name: str) -> list[str]:
    """The names of the modules among the package ``package_name`` and its public submodules that define no
    ``__all__``, sorted: their names escape :func:`undocumented_names`. Imports every public submodule."""
    package = importlib.import_module(package_name)
    return [module.__name__ for module in _public_modules(package) if not hasattr(module, "__all__")]
