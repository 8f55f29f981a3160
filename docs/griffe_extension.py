"""A griffe extension for the documentation site (mkdocs.yml loads it; it is not a page and not part of any package).

- The docstrings cross-reference names with Sphinx roles (``:func:`~deq_core.train.trainer.train```), which
  mkdocstrings does not read: they are shown as inline code instead (``~`` keeps the last part of the name, as in
  Sphinx).
- A paragraph ending in ``::`` introduces an indented literal block (reStructuredText, readable in ``help()``).
  Markdown would show the ``::`` and read the block as plain indented code. The block becomes a fenced code block
  (Python when it parses as Python) and the paragraph ends in ``:``.
- An asterisk at the end of a word, as in ``z* = f(z*)`` or ``ids[b*L]``, is a star, not the start of emphasis:
  Markdown would set the text up to the next one in italics. Such asterisks are escaped outside code; emphasis
  written as ``*word*`` stays emphasis.
- ``filters: public`` keeps a module's ``__all__`` and every special method; ``__post_init__`` and ``__slots__``
  of the config dataclasses are implementation details, not API, and are left out.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")
_HIDDEN = {"__post_init__", "__slots__"}
_CODE = re.compile(r"^[ \t]*```.*?^[ \t]*```[^\n]*$|(`+).+?\1", re.S | re.M)
_EMPHASIS = re.compile(r"(?<![\w*\\])\*(?=[^\s*])[^*\n]*?(?<=[^\s*\\])\*(?![\w*])")
_WORD_STAR = re.compile(r"(?<=[\w)\]])(?<!\*)\*(?!\*)")
_LITERAL_INTRO = re.compile(r"^(\s*)(.*\S)::$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape_prose(text: str) -> str:
    """Escape the word-final asterisks of a stretch of text without code, keeping ``*emphasis*`` spans."""
    out, last = [], 0
    for match in _EMPHASIS.finditer(text):
        out += [_WORD_STAR.sub(r"\\*", text[last : match.start()]), match.group(0)]
        last = match.end()
    return "".join([*out, _WORD_STAR.sub(r"\\*", text[last:])])


def escape_stray_asterisks(text: str) -> str:
    """Escape asterisks that end a word (``z*``, ``f(z*)``, ``b*L``) outside code spans and fenced blocks, so that
    Markdown shows them instead of opening emphasis."""
    out, last = [], 0
    for match in _CODE.finditer(text):
        out += [_escape_prose(text[last : match.start()]), match.group(0)]
        last = match.end()
    return "".join([*out, _escape_prose(text[last:])])


def _language(code: list[str]) -> str:
    """``python`` for a block that parses as Python, else ``text`` (a folder layout, a grammar, a formula)."""
    try:
        ast.parse("\n".join(code))
    except SyntaxError:
        return "text"
    return "python"


def literal_blocks_to_fences(text: str) -> str:
    """Turn each reST literal block (a line ending in ``::``, a blank line, lines indented deeper than the
    introducing one) into a fenced code block; the introducing line keeps one colon. Other text is unchanged."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _LITERAL_INTRO.match(lines[i])
        if not match or i + 2 >= len(lines) or lines[i + 1].strip() or not lines[i + 2].strip():
            out.append(lines[i])
            i += 1
            continue
        base = _indent(lines[i])
        end = i + 2
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
            end += 1
        block = lines[i + 2 : end]
        while block and not block[-1].strip():
            block.pop()
        if not block or _indent(block[0]) <= base:
            out.append(lines[i])
            i += 1
            continue
        cut = min(_indent(line) for line in block if line.strip())
        pad = " " * base
        code = [line[cut:] if line.strip() else "" for line in block]
        out += [f"{match.group(1)}{match.group(2)}:", "", f"{pad}```{_language(code)}"]
        out += [pad + line if line else "" for line in code]
        out += [f"{pad}```", ""]
        i = end
    return "\n".join(out).rstrip("\n") + ("\n" if text.endswith("\n") else "")


def _code(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


class SiteDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            fenced = literal_blocks_to_fences(_ROLE.sub(_code, obj.docstring.value))
            obj.docstring.value = escape_stray_asterisks(fenced)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        for name in _HIDDEN & set(cls.members):
            cls.del_member(name)
