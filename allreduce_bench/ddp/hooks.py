"""What ddp lends the core: its section of report.md and its figures, its rows (with a meta.json
block of their own), and `emulate --benchmarks ddp`."""
from __future__ import annotations

from allreduce_bench.core.hooks import RowKind, Runnable, Section, hookimpl


@hookimpl
def report_sections() -> list[Section]:
    from allreduce_bench.ddp.sections import SECTION
    return [SECTION]


@hookimpl
def row_kinds() -> list[RowKind]:
    return [RowKind("ddp", needs=("measure",), meta_block=True)]


@hookimpl
def emulate_runnables() -> list[Runnable]:
    from allreduce_bench.ddp.config import RUNNABLE
    return [RUNNABLE]
