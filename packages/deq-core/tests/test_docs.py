"""deq_core.train.docs on a tiny package written under tmp_path: which ``__all__`` names count as public, which a
README leaves out, and which public modules define no ``__all__``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deq_core.train.docs import modules_without_all, public_names, undocumented_names

PACKAGE = "fake_docs_pkg"


@pytest.fixture
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """fake_docs_pkg: __all__ in the package, a public module, a public subpackage's module, a private module and a
    public module inside a private subpackage (the last two are not public API)."""
    files = {
        "__init__.py": '__all__ = ["VERSION_NAME"]\nVERSION_NAME = "1"\n',
        "tools.py": '__all__ = ["make_thing", "Thing"]\ndef make_thing(): pass\nclass Thing: pass\n',
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


def test_public_names_walk_public_modules_only(fake_package: str) -> None:
    assert public_names(fake_package) == {
        "fake_docs_pkg": ["VERSION_NAME"],
        "fake_docs_pkg.sub.deep": ["deep_helper"],
        "fake_docs_pkg.tools": ["make_thing", "Thing"],
    }


def test_undocumented_names_lists_the_missing_ones(fake_package: str) -> None:
    readme = "# fake\n\n- `fake_docs_pkg.tools.make_thing()`: builds one. VERSION_NAME is the version.\n"
    missing = undocumented_names(fake_package, readme)
    assert missing == ["fake_docs_pkg.sub.deep.deep_helper", "fake_docs_pkg.tools.Thing"]


def test_a_name_counts_only_as_a_whole_word(fake_package: str) -> None:
    readme = "VERSION_NAMES, make_things, Thingy, my_deep_helper, deep_helper2, hidden_one, hidden_two"
    assert undocumented_names(fake_package, readme) == [
        "fake_docs_pkg.VERSION_NAME",
        "fake_docs_pkg.sub.deep.deep_helper",
        "fake_docs_pkg.tools.Thing",
        "fake_docs_pkg.tools.make_thing",
    ]
    assert undocumented_names(fake_package, "(VERSION_NAME) Thing. [make_thing] `deep_helper`") == []


def test_modules_without_all_lists_public_modules_only(fake_package: str) -> None:
    assert modules_without_all(fake_package) == ["fake_docs_pkg.nothing", "fake_docs_pkg.sub"]


def test_a_public_module_that_fails_to_import_is_an_error(fake_package: str, tmp_path: Path) -> None:
    (tmp_path / PACKAGE / "broken.py").write_text("import not_a_module_anywhere_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere_xyz"):
        public_names(fake_package)
