"""The Python documentation corpus (``data/pythondocs_corpus.py``) on a small reST source tree the test writes: markup
reduced to prose, code dropped, a deterministic split by document, the CLI and its error for a missing source."""

from __future__ import annotations

from pathlib import Path

import pytest

from deq_lm.data import CorpusNotFoundError
from deq_lm.data.pythondocs_corpus import main, prose_paragraphs, pythondocs_splits, write_pythondocs_corpus

DOC = """\
:mod:`fake` --- A fake module
=============================

.. module:: fake
   :synopsis: Nothing real.

The :func:`spam` function returns ``eggs`` for *every* input, see `the guide <https://example.org/guide>`_.

For example::

    >>> spam(1)
    'eggs'
    def hidden_code(): pass

This paragraph follows the literal block
and spans two lines.

.. code-block:: python

   also_hidden = True

.. note::

   Notes are prose and stay.

+-------+
| a | b |
+-------+
"""


def write_tree(root: Path, n_docs: int) -> Path:
    """``n_docs`` documents under root/lib and root/ref, each with a unique marker word (docNN)."""
    for i in range(n_docs):
        folder = root / ("lib" if i % 2 else "ref")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"page{i:02d}.rst.txt").write_text(DOC + f"\nUnique marker doc{i:02d} here.\n", encoding="utf-8")
    return root


def test_markup_is_reduced_to_prose_and_code_is_dropped():
    lines = prose_paragraphs(DOC)
    text = "\n".join(lines)
    assert lines[0] == "fake --- A fake module"  # a run of one mark is one token
    assert "The spam function returns eggs for every input , see the guide ." in lines
    assert "For example :" in lines
    assert "This paragraph follows the literal block and spans two lines ." in lines
    assert "Notes are prose and stay ." in lines
    for gone in ("hidden_code", "also_hidden", ">>>", "synopsis", "https", "module ::", "`", "*"):
        assert gone not in text, gone


def test_split_is_by_document_deterministic_and_disjoint(tmp_path):
    source = write_tree(tmp_path / "src", 20)
    splits = pythondocs_splits(source)
    owner: dict[str, str] = {}
    for split, lines in splits.items():
        for line in lines:
            for word in line.split():
                if word.startswith("doc") and word[3:].isdigit():
                    assert owner.setdefault(word, split) == split  # one document, one split
    assert len(owner) == 20
    # sorted relative paths: lib/page01, lib/page03, ..., ref/page00, ...: index 0 and 10 -> valid, 5 and 15 -> test
    order = sorted(owner, key=lambda w: ("lib" if int(w[3:]) % 2 else "ref", w))
    assert [w for w in order if owner[w] == "valid"] == [order[0], order[10]]
    assert [w for w in order if owner[w] == "test"] == [order[5], order[15]]
    assert pythondocs_splits(source) == splits


def test_written_files_and_cli(tmp_path, capsys):
    source = write_tree(tmp_path / "src", 12)
    out = write_pythondocs_corpus(tmp_path / "corpus", source)
    for split, lines in pythondocs_splits(source).items():
        assert (out / f"{split}.txt").read_text(encoding="utf-8") == "\n".join(lines) + "\n"
    before = (out / "train.txt").stat().st_mtime_ns
    assert main([str(out), "--source", str(source)]) == 0
    assert (out / "train.txt").stat().st_mtime_ns == before  # same text: left alone
    assert "train:" in capsys.readouterr().out


def test_missing_source_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(CorpusNotFoundError, match="apt-get install python3.11-doc"):
        pythondocs_splits(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusNotFoundError, match=r"no \*\.rst\.txt files"):
        pythondocs_splits(tmp_path / "empty")
    assert main([str(tmp_path / "out"), "--source", str(tmp_path / "nowhere")]) == 2
    assert "python3.11-doc" in capsys.readouterr().err
