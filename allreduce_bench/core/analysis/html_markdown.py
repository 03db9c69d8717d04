"""report.md's markdown: its one pipe-table writer, and its rendering as HTML (CommonMark, raw HTML escaped)."""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd
from markdown_it import MarkdownIt
from markdown_it.token import Token

NUMBER = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?\s*(%|[KMG]|x)?|nan|-")


def cell_text(value) -> str:
    """A cell as a pipe table holds it: NaN as '-', a flag as yes/no, `|` escaped, a line break a space."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    text = "-" if isinstance(value, float) and value != value else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: pd.DataFrame, rule: str = "---") -> str:
    """`table` as a pipe table, `rule` under the header (`---:`: right-aligned)."""
    rows = ["| " + " | ".join(map(cell_text, line)) + " |"
            for line in (table.columns, *table.itertuples(index=False))]
    return "\n".join([rows[0], "|" + f"{rule}|" * len(table.columns), *rows[1:]])


def markdown_html(text: str, image: Callable[[str, str], str],
                  decorate: Callable[[list[Token]], None] | None = None) -> str:
    """`text` as HTML, numbers right-aligned, each image as `image(alt, path)`; `decorate(tokens)`
    may set attributes before rendering."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.add_render_rule("image", lambda self, tokens, at, options, env: image(
        self.renderInlineAsText(tokens[at].children, options, env), tokens[at].attrGet("src") or ""))
    tokens = md.parse(text)
    for at, token in enumerate(tokens):
        if token.type == "td_open" and NUMBER.fullmatch(tokens[at + 1].content.strip()):
            token.attrJoin("class", "num")
        elif token.type == "inline" and [c.type for c in token.children or []] == ["image"] \
                and tokens[at - 1].type == "paragraph_open":
            tokens[at - 1].hidden = tokens[at + 1].hidden = True
    if decorate is not None:
        decorate(tokens)
    return md.renderer.render(tokens, md.options, {})
