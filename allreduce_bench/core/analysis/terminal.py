"""What a command prints fitted to a terminal: lines of at most WIDTH columns. A table too wide
for it prints row by row, each row's cells named; the full table is in the report's file."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.text import WIDTH, wrapped


def terminal_table(table: pd.DataFrame) -> str:
    """`table` aligned as pandas prints it where it fits in WIDTH; else one wrapped line per row,
    "column: value" for each cell."""
    text = table.to_string(index=False)
    if max(map(len, text.splitlines())) <= WIDTH:
        return text
    return "\n".join(wrapped("; ".join(f"{column}: {value}" for column, value in zip(table.columns, row)), "- ")
                     for row in table.itertuples(index=False))
