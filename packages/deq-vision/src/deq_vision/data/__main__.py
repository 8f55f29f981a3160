"""``python -m deq_vision.data glyphs --output-dir DIR [--train N] [--test N] [--size S] [--seed K]``: write a
glyph set (:mod:`deq_vision.data.glyphs`)."""

from __future__ import annotations

import sys

from .glyphs import main

COMMANDS = {"glyphs": main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python -m deq_vision.data {{{','.join(COMMANDS)}}} [options]; e.g. glyphs --output-dir DIR")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
