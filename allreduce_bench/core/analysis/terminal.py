"""Tables fitted to a terminal of WIDTH columns."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.text import WIDTH, wrapped


def terminal_table(table: pd.DataFrame) -> str:
    """`table` as pandas prints it where it fits; else a wrapped "column: value; ..." line per row."""
    text = table.to_string(index=False)
    if max(map(len, text.splitlines())) <= WIDTH:
        return text
    return "\n".join(wrapped("; ".join(f"{column}: {value}" for column, value in zip(table.columns, row)), "- ")
                     for row in table.itertuples(index=False))
