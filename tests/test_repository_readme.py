"""The repository README's package table names each package's current version (its pyproject.toml's), and so does
each package's ``__version__``. The READMEs stay short: the root one at most 80 lines, each package's at most 250, no
paragraph over 120 words, no absolute path of a machine (the details are on the documentation site, docs/)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


# The READMEs are for readers: the root one says what this is and where to start, each package's what it is, how to
# install and run it, its presets and headline results; every detail lives on the documentation site (docs/).
# A paragraph is a run of lines between blank lines, outside code fences and tables.
ROOT_README_LINES = 80
PACKAGE_README_LINES = 250
PARAGRAPH_WORDS = 120
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp)/")


def _readmes() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "packages").glob("*/README.md"))]


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a Markdown text: runs of lines between blank lines, without code fences and table rows."""
    found: list[str] = []
    current: list[str] = []
    fence = None
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif stripped and not stripped.startswith("|"):
            current.append(stripped)
            continue
        if current:
            found.append(" ".join(current))
            current = []
    return found


def test_paragraphs_helper() -> None:
    text = "a b\nc\n\n```bash\nx y z\n\nw\n```\n| t | u |\n|---|---|\nd e\n\n- f\n- g h\n"
    assert paragraphs(text) == ["a b c", "d e", "- f - g h"]
    assert MACHINE_PATH.search("--output-dir /tmp/q") and MACHINE_PATH.search("(from `/work/runs/lm` here)")
    assert not MACHINE_PATH.search("--output-dir runs/tmp/q") and not MACHINE_PATH.search("~/.cache/huggingface")


def test_readme_lengths() -> None:
    assert len(_readmes()) == 5
    assert len((REPO / "README.md").read_text().splitlines()) <= ROOT_README_LINES
    for readme in _readmes()[1:]:
        lines = len(readme.read_text().splitlines())
        assert lines <= PACKAGE_README_LINES, f"{readme.relative_to(REPO)}: {lines} lines (move details to docs/)"


def test_readme_paragraphs_are_short() -> None:
    for readme in _readmes():
        for paragraph in paragraphs(readme.read_text()):
            words = len(paragraph.split())
            assert words <= PARAGRAPH_WORDS, f"{readme.relative_to(REPO)}: {words} words in '{paragraph[:60]}...'"


def test_readmes_name_no_machine_path() -> None:
    for readme in _readmes():
        for number, line in enumerate(readme.read_text().splitlines(), 1):
            assert not MACHINE_PATH.search(line), f"{readme.relative_to(REPO)}:{number}: {line.strip()}"


def _committed_text_files() -> list[Path]:
    """The text files of the docs site, the packages' results and run logs, and lab/ (what a reader opens)."""
    roots = [REPO / "docs", REPO / "lab", *(REPO / "packages").glob("*/results")]
    suffixes = {".md", ".json", ".jsonl", ".sh", ".txt", ".py", ".csv"}
    return sorted(p for root in roots for p in root.rglob("*") if p.suffix in suffixes and p.is_file())


def test_docs_results_and_lab_name_no_machine_path() -> None:
    files = _committed_text_files()
    assert len(files) > 100  # the run logs are there: a moved folder would otherwise pass unnoticed
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            assert not MACHINE_PATH.search(line), f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}"
