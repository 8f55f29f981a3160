"""The repository README's package table names each package's current version (its pyproject.toml's), and so does
each package's ``__version__``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_package_table_versions_match_pyproject() -> None:
    rows = dict(re.findall(r"^\| \[(deq-[a-z]+)\]\(.*\| ([0-9][0-9.]*) \|$", (REPO / "README.md").read_text(), re.M))
    packages = sorted(p.parent for p in (REPO / "packages").glob("*/pyproject.toml"))
    assert len(packages) == 4 and set(rows) == {p.name for p in packages}
    for folder in packages:
        version = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["version"]
        assert rows[folder.name] == version, f"README.md lists {folder.name} {rows[folder.name]}, pyproject {version}"


def test_package_dunder_versions_match_pyproject() -> None:
    """``__version__`` in src/<module>/__init__.py, read as text (the task packages need not be installed here)."""
    for folder in sorted(p.parent for p in (REPO / "packages").glob("*/pyproject.toml")):
        version = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["version"]
        (init,) = (folder / "src").glob("*/__init__.py")
        found = re.findall(r'^__version__ = "([^"]+)"$', init.read_text(), re.M)
        assert found == [version], f"{init} has __version__ {found}, pyproject {version}"
