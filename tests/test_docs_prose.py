"""The documentation site's prose check (``docs/prose_check.py``, run by ``nox -s docs``) splits and counts as its
docstring says, and the site's pages meet its targets.

The script lives beside the pages, outside every package; it is loaded from its path (standard library only).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "prose_check.py"


@pytest.fixture(scope="module")
def prose() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_prose_check", SCRIPT)
    assert spec is not None and spec.loader is not None, f"cannot load {SCRIPT}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def test_code_tables_math_headings_and_directives_are_not_prose(prose: ModuleType) -> None:
    text = (
        "# A heading here\n\nOne two three.\n\n```python\nx = 1. Not prose\n```\n\n| a | b |\n|---|---|\n| c. D | e |\n"
        '\n$$\nz = f(z). Math\n$$\n\n::: deq_core.solve\n\n!!! note "Title"\n\n    Four five.\n\n'
        '??? note "results/x.md"\n\n    --8<-- "results/x.md"\n'
    )
    assert prose.sentences(text) == ["One two three.", "Four five."]


def test_sentences_end_at_a_stop_before_a_capital_digit_or_code_span(prose: ModuleType) -> None:
    text = "It ran 1.5x faster, e.g. at batch 8. Then it stopped. `solve()` returns. 3 runs held! Did it? Yes."
    assert prose.sentences(text) == [
        "It ran 1.5x faster, e.g. at batch 8.",
        "Then it stopped.",
        "`code` returns.",
        "3 runs held!",
        "Did it?",
        "Yes.",
    ]


def test_blocks_list_items_links_and_inline_math(prose: ModuleType) -> None:
    text = "A [linked page](page.md#x) and $z^\\star$ here\ncontinues.\n- first item\n- second `a.b` item\n1. third\n"
    assert prose.sentences(text) == ["A linked page and here continues.", "first item", "second `code` item", "third"]
    assert [prose.word_count(s) for s in prose.sentences(text)] == [6, 2, 3, 1]
    assert prose.word_count("a -- b 1e-3 ->") == 3  # tokens without a letter or digit are no words


def test_targets_fail_a_long_page(prose: ModuleType, tmp_path: Path) -> None:
    long_sentence = " ".join(["word"] * (prose.MAX_SENTENCE + 1)) + "."
    short = "Short one here.\n\n"
    page = tmp_path / "page.md"
    page.write_text(short * 3 + long_sentence + "\n")
    stats = prose.PageStats("page.md", 60, tuple(prose.word_count(s) for s in prose.sentences(page.read_text())))
    assert stats.over == 1 and stats.median == 3
    assert stats.failures() == [f"1 sentences over {prose.MAX_SENTENCE} words"]
    wordy = prose.PageStats("page.md", prose.MAX_WORDS + 1, (prose.MAX_MEDIAN + 1,))
    assert len(wordy.failures()) == 2


def test_every_page_of_the_site_meets_the_targets(prose: ModuleType) -> None:
    pages = prose.pages()
    assert len(pages) >= 10 and not any("reference" in p.parts for p in pages)
    failing = {str(page.relative_to(REPO)): prose.measure(page).failures() for page in pages}
    failing = {name: problems for name, problems in failing.items() if problems}
    assert not failing, f"pages above the prose targets (python docs/prose_check.py --longest 5): {failing}"
