"""What links lends the core: the intra/inter table and plots/links.png in the report, its rows,
and `emulate --benchmarks links`."""
from __future__ import annotations

from allreduce_bench.core.hooks import RowKind, Runnable, Section, hookimpl


@hookimpl
def report_sections() -> list[Section]:
    from allreduce_bench.links.summary import draw_links, links_table
    return [Section("links", draw=draw_links, tables=links_table)]


@hookimpl
def row_kinds() -> list[RowKind]:
    return [RowKind("links")]


@hookimpl
def emulate_runnables() -> list[Runnable]:
    from allreduce_bench.links.config import RUNNABLE
    return [RUNNABLE]
