"""The "Is this normal?" table of report.md, report.html and `report`'s terminal (lent to the
core as a Section's tables) and `run`'s summary lines (Extensions.summaries)."""
from __future__ import annotations

from allreduce_bench.core.extensions import Section
from allreduce_bench.expect import verdict

NOTE = ("Each run's peak busbw as a share of the closest published figure for the same GPU, "
        "collective and layout (the `expect` catalogue: measurements, operators' health-check "
        "thresholds, maintainers' figures, each with its source and date) and of the link limit "
        "(the NVLink rate on one node; across nodes the node's NICs together: doc/methodology.md). "
        "Where it falls short, the last column's checks come from what the run recorded.")


def tables(frame, size_bytes=None) -> list:
    table = verdict.table(frame)
    return [] if table.empty else [("Is this normal?", NOTE, table)]


SECTION = Section("expect", tables=tables)
summary_lines = verdict.summary_lines
