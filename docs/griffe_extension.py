"""A griffe extension for the documentation site (mkdocs.yml loads it; it is not a page and not part of any package).

- The docstrings cross-reference names with Sphinx roles (``:func:`~deq_core.train.trainer.train```), which
  mkdocstrings does not read: they are shown as inline code instead (``~`` keeps the last part of the name, as in
  Sphinx).
- ``filters: public`` keeps a module's ``__all__`` and every special method; ``__post_init__`` and ``__slots__``
  of the config dataclasses are implementation details, not API, and are left out.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")
_HIDDEN = {"__post_init__", "__slots__"}


def _code(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


class SiteDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        for name in _HIDDEN & set(cls.members):
            cls.del_member(name)
