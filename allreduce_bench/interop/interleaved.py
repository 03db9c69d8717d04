"""Rows of several nccl-tests runs printed into one stream at once (a build without MPI started
on k hosts) told apart: within a run a block's sizes only grow, so each row goes to the first
run it fits; a row that fits none is not guessed (doc/interop.md)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    line: int
    block: tuple  # (type, redop, root): nccl-tests' loops restart the sizes per block
    size_bytes: int
    fields: int


@dataclass
class Run:
    fields: int
    max_bytes: int | None = None  # sizes are rounded down to whole elements, never up
    last: dict = field(default_factory=dict)  # block -> last size given
    given: Counter = field(default_factory=Counter)  # (block, size) -> rows given

    def fits(self, row: Row, share: int) -> bool:
        if row.fields != self.fields:
            return False
        if self.max_bytes is not None and row.size_bytes > self.max_bytes:
            return False
        last = self.last.get(row.block, -1)
        return row.size_bytes > last or (row.size_bytes == last
                                         and self.given[(row.block, row.size_bytes)] < share)

    def take(self, row: Row) -> None:
        self.last[row.block] = row.size_bytes
        self.given[(row.block, row.size_bytes)] += 1


def assign(rows: list[Row], runs: list[Run]) -> tuple[list[int], Row | None]:
    """The run index of every row (in order), and the first row no run can take (or None)."""
    if len(runs) == 1:
        return [0] * len(rows), None
    printed = Counter((r.block, r.size_bytes) for r in rows)
    chosen: list[int] = []
    for row in rows:
        share = math.ceil(printed[(row.block, row.size_bytes)] / len(runs))
        index = next((i for i, run in enumerate(runs) if run.fits(row, share)), None)
        if index is None:
            return chosen, row
        runs[index].take(row)
        chosen.append(index)
    return chosen, None
