"""Rows of several nccl-tests runs printed into one stream at once, told apart.

nccl-tests built without MPI and started on k hosts runs k independent single-host tests that
print into the same stream (nccl-tests#213, #109): k preambles, k device lists and k headers,
then rows of every run mixed line by line. Within one run a block of rows (one type, redop and
root) only grows in size, and stays below the run's printed maxBytes; a size can
repeat within a run (sizes rounded to whole elements: the zero-byte rows) as often as it is
printed per run. So each row goes to the first run it fits: the same field count, a size up to
the run's maxBytes, larger than the run's last size in that block (or equal, while the run has
fewer of that size than its share). With identical sweeps the k-th printed row of a size lands
in run k; which host printed it the output does not say. A row that fits no run is not
guessed: the caller refuses the file.
"""
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
    """What is known of a run before its rows: its row width and its printed size range."""

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
    chosen = []
    for row in rows:
        share = math.ceil(printed[(row.block, row.size_bytes)] / len(runs))
        index = next((i for i, run in enumerate(runs) if run.fits(row, share)), None)
        if index is None:
            return chosen, row
        runs[index].take(row)
        chosen.append(index)
    return chosen, None
