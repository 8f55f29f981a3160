"""The repository README's package table names each package's current version (its pyproject.toml's)."""

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
