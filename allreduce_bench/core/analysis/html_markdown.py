"""The little markdown report.md's sections are written in: its one pipe-table writer, and the
reader that turns it into HTML for report.html: headings, paragraphs, pipe tables, lists, code,
and images (inlined by the caller's `image`). Only what this project's sections write; anything
else reads as a paragraph. No dependency."""
from __future__ import annotations

import html
import re
from collections.abc import Callable

import pandas as pd

IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")
INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
          (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
          (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>')]


def inline(text: str) -> str:
    """One line's text escaped, with `code`, **bold** and [links](url)."""
    text = html.escape(text, quote=False)
    for pattern, replacement in INLINE:
        text = pattern.sub(replacement, text)
    return text


NUMBER = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?\s*(%|[KMG]|x)?|nan|-")


def td(text: str, escaped: str | None = None) -> str:
    """One cell, numbers right-aligned (class num) and words left."""
    shown = inline(text) if escaped is None else escaped
    numeric = ' class="num"' if NUMBER.fullmatch(text.strip()) else ""
    return f"<td{numeric}>{shown}</td>"


def _cell_text(value) -> str:
    """A cell as a pipe table holds it: NaN as '-', a `|` escaped (GitHub's `\\|`) so that it
    does not start a cell of its own, a line break as a space."""
    text = "-" if isinstance(value, float) and value != value else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: pd.DataFrame, rule: str = "---") -> str:
    """`table` as a pipe table: the header, the `rule` (`---:`: right-aligned), one line a row;
    every line has the header's cells, whatever the cells hold."""
    rows = ["| " + " | ".join(map(_cell_text, line)) + " |"
            for line in (table.columns, *table.itertuples(index=False))]
    return "\n".join([rows[0], "|" + f"{rule}|" * len(table.columns), *rows[1:]])


UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    """One table line's cells, `\\|` read back as `|`."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in UNESCAPED_PIPE.split(inner)]


def table_html(lines: list[str]) -> str:
    """A pipe table (header, rule, rows) as <table>."""
    head, body = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    rows = "".join("<tr>" + "".join(td(c) for c in row) + "</tr>" for row in body)
    header = "".join(f"<th>{inline(c)}</th>" for c in head)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"


def _block(lines: list[str], image: Callable[[str, str], str]) -> str:
    """One blank-line separated block."""
    first = lines[0]
    if first.startswith("#"):
        level = min(len(first) - len(first.lstrip("#")), 6)
        heading = f"<h{level}>{inline(first.lstrip('#').strip())}</h{level}>"
        rest = _block(lines[1:], image) if len(lines) > 1 else ""
        return heading + rest
    if first.startswith("|"):
        return table_html(lines)
    if first.startswith(("- ", "* ")):
        items = "".join(f"<li>{inline(line[2:])}</li>" for line in lines)
        return f"<ul>{items}</ul>"
    if len(lines) == 1 and (match := IMAGE.match(first.strip())):
        return image(match.group(1), match.group(2))
    return "<p>" + " ".join(inline(line) for line in lines) + "</p>"


def markdown_html(text: str, image: Callable[[str, str], str]) -> str:
    """`text` as HTML; `image(alt, path) -> html` for each ![alt](path) on a line of its own."""
    parts: list[str] = []
    block: list[str] = []
    fenced: list[str] | None = None
    for line in text.splitlines() + [""]:
        if fenced is not None:
            if line.startswith("```"):
                parts.append(f"<pre>{html.escape(chr(10).join(fenced))}</pre>")
                fenced = None
            else:
                fenced.append(line)
        elif line.startswith("```"):
            fenced = []
        elif line.strip():
            block.append(line)
            continue
        if block:
            parts.append(_block(block, image))
            block = []
    return "\n".join(parts)
