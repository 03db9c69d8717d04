"""Pipe tables as a markdown reader splits them: a row with more or fewer cells than its header
and separator shows its values under the wrong headings (GitHub, report.html, mkdocs)."""
from __future__ import annotations

import re
from pathlib import Path

PIPE = re.compile(r"(?<!\\)\|")  # a `\|` is a pipe inside a cell


def cell_count(line: str) -> int:
    return len(PIPE.split(line.strip().removeprefix("|").removesuffix("|")))


def tables(text: str) -> list[list[str]]:
    """Every run of lines starting with `|`, outside fenced code."""
    found, block, fenced = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            block.append(line)
            continue
        if block:
            found.append(block)
            block = []
    return found


def mismatched(text: str) -> list[str]:
    """Each table whose lines do not all have the header's cell count: its header and counts."""
    return [f"{block[0][:60]}...: {[cell_count(line) for line in block]}" for block in tables(text)
            if len({cell_count(line) for line in block}) > 1]


def mismatched_in(folder: Path) -> dict[str, list[str]]:
    """mismatched() of every .md file under `folder`, by path, where any is."""
    found = {}
    for path in sorted(Path(folder).rglob("*.md")):
        bad = mismatched(path.read_text(encoding="utf-8", errors="replace"))
        if bad:
            found[str(path)] = bad
    return found
