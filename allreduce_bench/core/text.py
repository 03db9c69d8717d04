"""Lines fitted to a terminal of WIDTH columns, for every command's printed text."""
from __future__ import annotations

import textwrap

WIDTH = 120


def wrapped(text: str, indent: str = "") -> str:
    """Each line of `text` after `indent`, wrapped past WIDTH with continuations two spaces in."""
    return "\n".join(textwrap.fill(line, WIDTH, initial_indent=indent, subsequent_indent=" " * (len(indent) + 2),
                                   break_on_hyphens=False) if len(indent + line) > WIDTH else indent + line
                      for line in text.splitlines())
