"""Lines fitted to a terminal of WIDTH columns: what the driver's start line and every
command's printed text share (core/analysis/terminal.py prints tables with it)."""
from __future__ import annotations

import textwrap

WIDTH = 120


def wrapped(text: str, indent: str = "") -> str:
    """Each line of `text` after `indent`, one longer than WIDTH wrapped with its continuation
    lines two spaces further in; shorter lines (a table's) exactly as they are."""
    return "\n".join(textwrap.fill(line, WIDTH, initial_indent=indent, subsequent_indent=" " * (len(indent) + 2),
                                   break_on_hyphens=False) if len(indent + line) > WIDTH else indent + line
                      for line in text.splitlines())
