"""The reader has no tracker: no file of the repository points at an issue or a pull request by its number. Code,
tests and docs say what they mean instead."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACKER_NUMBER = re.compile(r"\b(issues?|PRs?|pull requests?)\s+#?[0-9]+", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".sh", ".json", ".jsonl", ".js", ".css", ""}


def repository_files() -> list[Path]:
    """The files git tracks (a clean clone's files), or every file under the root outside hidden folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split("\0")
        return [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):  # an unpacked archive without git
        return [p for p in ROOT.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.parts)]


def tracker_lines(text: str, name: str) -> list[str]:
    """``name:line: text`` for each line of ``text`` that names a tracker number."""
    return [
        f"{name}:{n}: {line.strip()[:120]}"
        for n, line in enumerate(text.splitlines(), 1)
        if TRACKER_NUMBER.search(line)
    ]


def read_text(path: Path) -> str:
    """The file's text, or "" for a binary or non-UTF-8 file."""
    if path.suffix not in TEXT_SUFFIXES or not path.is_file():
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def test_the_pattern_finds_what_it_is_for():
    # the examples are built from pieces, so that this file itself holds no tracker number
    named = ["fixed as asked in " + "Issue " + "41", "see " + "PR #" + "7", "issues " + "3 and 4"]
    text = "\n".join([*named, "an issue of size 3 is not one", "prefix 12"])
    assert tracker_lines(text, "note.md") == [f"note.md:{n}: {line}" for n, line in enumerate(named, 1)]


def test_no_file_names_a_tracker_number():
    files = repository_files()
    assert len(files) > 100, files  # the repository's files were found
    found = [line for path in files for line in tracker_lines(read_text(path), str(path.relative_to(ROOT)))]
    assert not found, "say what is meant instead of a tracker number:\n" + "\n".join(found[:40])
