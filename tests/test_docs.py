"""deq-core's public API is declared and on the documentation site.

- Every public module of deq_core (no part of its dotted path starts with ``_``; ``deq_core.train`` included)
  defines ``__all__``, its public API.
- Every name of those ``__all__`` lists is on the API reference pages (``docs/reference/*.md``): a mkdocstrings
  directive names it (``::: deq_core.Anderson``) or its module (``::: deq_core.train.trainer`` renders the module's
  ``__all__``), or the same class or function is rendered under another path (``deq_core.DEQ`` is
  ``deq_core.layer.DEQ``). A new public module or name of deq-core therefore cannot be left out of the site.
- Every module of the task packages that defines ``__all__`` (read from their sources, without importing them) has a
  directive of its own.
- Every Python example of the site's deq-core pages runs as written (the custom-solver page includes
  ``examples/custom_solver.py``, which test_custom_solver.py runs).

The helpers are checked first on a tiny package written under tmp_path.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "reference"
TASK_PACKAGES = ("deq-toy", "deq-lm", "deq-vision")
CORE_PAGES = ("getting-started.md", "deq-core.md", "deq-core-training.md")  # examples needing deq-core[train] only

# "::: dotted.path" at the start of a line, then its indented options block (YAML), if any.
_DIRECTIVE = re.compile(r"^::: ([\w.]+)[ \t]*\n((?:(?:[ \t]+\S[^\n]*|[ \t]*)\n)*)", re.M)


def public_modules(package_name: str) -> list[ModuleType]:
    """The package and every submodule with no private part in its dotted path, imported, sorted by name."""
    package = importlib.import_module(package_name)
    modules = [package]
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), prefix=package_name + "."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            modules.append(importlib.import_module(info.name))
    return sorted(modules, key=lambda module: module.__name__)


def modules_without_all(package_name: str) -> list[str]:
    """The public modules of ``package_name`` that define no ``__all__``, sorted."""
    return [module.__name__ for module in public_modules(package_name) if not hasattr(module, "__all__")]


def reference_directives(text: str) -> dict[str, bool | list[str]]:
    """The mkdocstrings directives of a Markdown text: dotted path -> the members it renders, True (all public ones),
    False (none: ``members: false``) or the list its ``members:`` option gives."""
    directives: dict[str, bool | list[str]] = {}
    for path, options in _DIRECTIVE.findall(text):
        members: bool | list[str] = True
        match = re.search(r"^\s*members:[ \t]*(.*)\n((?:\s*- .*\n)*)", options, re.M)
        if match:
            value, items = match.group(1).strip(), re.findall(r"- *(\S+)", match.group(2))
            if value in ("false", "no", "[]"):
                members = False
            elif value.startswith("["):
                members = [name.strip() for name in value.strip("[]").split(",") if name.strip()]
            elif items:
                members = items
        directives[path] = members
    return directives


def _resolve(path: str) -> object:
    """The module or object a dotted path names (the longest importable module prefix, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"the directive '::: {path}' names nothing importable")


def _has_identity(obj: object) -> bool:
    """Classes and functions are the same object wherever they are exported; constants (ints, strings) may be shared
    by coincidence, so they count only under their own path."""
    return inspect.isclass(obj) or inspect.isroutine(obj)


def undocumented_names(package_name: str, directives: dict[str, bool | list[str]]) -> list[str]:
    """The public names (``module.name``) of ``package_name`` that no directive renders, sorted."""
    paths: set[str] = set()
    objects: set[int] = set()
    for path, members in directives.items():
        target = _resolve(path)
        if isinstance(target, ModuleType):
            names = list(getattr(target, "__all__", [])) if members is True else list(members or [])
            for name in names:
                paths.add(f"{path}.{name}")
                if _has_identity(getattr(target, name)):
                    objects.add(id(getattr(target, name)))
        else:
            paths.add(path)
            objects.add(id(target))
    missing = []
    for module in public_modules(package_name):
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if f"{module.__name__}.{name}" not in paths and not (_has_identity(obj) and id(obj) in objects):
                missing.append(f"{module.__name__}.{name}")
    return sorted(missing)


def modules_declaring_all(src: Path) -> list[str]:
    """The public modules under a src/ folder whose source assigns ``__all__``, read with ast (nothing imported)."""
    found = []
    for file in sorted(src.rglob("*.py")):
        parts = list(file.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts[1:]):
            continue
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
                found.append(".".join(parts))
                break
    return found


def _site_directives() -> dict[str, bool | list[str]]:
    pages = sorted(REFERENCE.glob("*.md"))
    assert pages, f"no API reference pages in {REFERENCE}"
    directives: dict[str, bool | list[str]] = {}
    for page in pages:
        directives.update(reference_directives(page.read_text(encoding="utf-8")))
    return directives


# The helpers, on a package written under tmp_path.

PACKAGE = "fake_docs_pkg"


@pytest.fixture
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """fake_docs_pkg: __all__ in the package (one name re-exported from a public module), a public module, a module
    without __all__, a public subpackage's module, a private module and a public module inside a private subpackage
    (the last two are not public API)."""
    files = {
        "__init__.py": 'from .tools import make_thing\n__all__ = ["VERSION_NAME", "make_thing"]\nVERSION_NAME = "1"\n',
        "tools.py": '__all__ = ["make_thing", "Thing", "LIMIT"]\nLIMIT = 1\ndef make_thing(): pass\nclass Thing: ...\n',
        "nothing.py": "x = 1\n",
        "sub/__init__.py": "",
        "sub/deep.py": '__all__ = ["deep_helper"]\ndef deep_helper(): pass\n',
        "_private.py": '__all__ = ["hidden_one"]\ndef hidden_one(): pass\n',
        "_inner/__init__.py": "",
        "_inner/visible.py": '__all__ = ["hidden_two"]\ndef hidden_two(): pass\n',
    }
    for relative, text in files.items():
        path = tmp_path / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield PACKAGE
    for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
        del sys.modules[name]


def test_modules_without_all_lists_public_modules_only(fake_package: str) -> None:
    assert modules_without_all(fake_package) == ["fake_docs_pkg.nothing", "fake_docs_pkg.sub"]


def test_a_public_module_that_fails_to_import_is_an_error(fake_package: str, tmp_path: Path) -> None:
    (tmp_path / PACKAGE / "broken.py").write_text("import not_a_module_anywhere_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere_xyz"):
        modules_without_all(fake_package)


def test_directives_and_their_members_options() -> None:
    text = (
        "# page\n\n::: pkg\n    options:\n      members: false\n\ntext ::: not.a.directive\n\n::: pkg.mod\n\n"
        "::: pkg.other\n    options:\n      heading_level: 3\n      members:\n        - a\n        - b\n\n"
        "::: pkg.inline\n    options:\n      members: [c, d]\n"
    )
    assert reference_directives(text) == {
        "pkg": False,
        "pkg.mod": True,
        "pkg.other": ["a", "b"],
        "pkg.inline": ["c", "d"],
    }


def test_undocumented_names_follow_modules_members_and_identity(fake_package: str) -> None:
    directives = reference_directives(
        "::: fake_docs_pkg\n    options:\n      members: false\n\n::: fake_docs_pkg.tools\n"
    )
    # make_thing of the package is tools.make_thing (rendered there); VERSION_NAME is not rendered (members: false)
    assert undocumented_names(fake_package, directives) == [
        "fake_docs_pkg.VERSION_NAME",
        "fake_docs_pkg.sub.deep.deep_helper",
    ]
    directives = reference_directives(
        "::: fake_docs_pkg\n\n::: fake_docs_pkg.tools\n    options:\n      members: [make_thing]\n\n"
        "::: fake_docs_pkg.sub.deep.deep_helper\n"
    )
    # LIMIT is a constant: another path with an equal value does not count
    assert undocumented_names(fake_package, directives) == ["fake_docs_pkg.tools.LIMIT", "fake_docs_pkg.tools.Thing"]
    with pytest.raises(ImportError, match="names nothing importable"):
        undocumented_names(fake_package, {"not_a_package_anywhere_xyz.thing": True})


def test_modules_declaring_all_reads_sources(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "__all__ = ['a']\n",
        "pkg/mod.py": "__all__: list[str] = []\n",
        "pkg/plain.py": "x = 1\n",
        "pkg/_hidden.py": "__all__ = ['b']\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "import os\n__all__ = ['c']\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert modules_declaring_all(tmp_path) == ["pkg", "pkg.mod", "pkg.sub.deep"]


# The repository.


def test_every_public_module_defines_all() -> None:
    missing = modules_without_all("deq_core")
    assert not missing, f"public modules without __all__ (their names escape the API reference check): {missing}"


def test_api_reference_renders_every_public_name_of_deq_core() -> None:
    # only deq_core's directives: the task packages are not installed beside deq-core in its own test environment
    directives = {path: members for path, members in _site_directives().items() if path.split(".")[0] == "deq_core"}
    missing = undocumented_names("deq_core", directives)
    assert not missing, f"public names of deq_core on no API reference page (docs/reference/*.md): {missing}"


@pytest.mark.parametrize("package", TASK_PACKAGES)
def test_api_reference_has_every_public_module_of_the_task_packages(package: str) -> None:
    modules = modules_declaring_all(REPO / "packages" / package / "src")
    assert modules, f"no module of {package} declares __all__"
    missing = [module for module in modules if module not in _site_directives()]
    assert not missing, f"modules of {package} with __all__ but no '::: module' on docs/reference/*.md: {missing}"


def _page_examples() -> list:
    examples = []
    for page in CORE_PAGES:
        blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / page).read_text(encoding="utf-8"), re.S | re.M)
        examples += [pytest.param(page, number, code, id=f"{page}:{number}") for number, code in enumerate(blocks)]
    return examples


@pytest.mark.parametrize(("page", "number", "code"), _page_examples())
def test_python_examples_of_the_deq_core_pages_run(
    page: str, number: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # an example may write files (the training skeleton's writes runs/demo/)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an example may stop a solve unconverged
        exec(compile(code, f"docs/{page} block {number}", "exec", dont_inherit=True), {"__name__": "docs_example"})
