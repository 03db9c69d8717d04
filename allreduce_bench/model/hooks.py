"""What the cost model lends the core: two sections of report.md."""
from __future__ import annotations

from allreduce_bench.core.hooks import Section, hookimpl


@hookimpl
def report_sections() -> list[Section]:
    from allreduce_bench.model.sections import COLLECTIVES, WINNERS
    return [WINNERS, COLLECTIVES]
