"""What the cost model lends the core: report.md's "which algorithm wins where" and "cost model
per collective" sections."""
from __future__ import annotations

from allreduce_bench.core.hooks import Section, hookimpl


@hookimpl
def report_sections() -> list[Section]:
    from allreduce_bench.model.sections import COLLECTIVES, WINNERS
    return [WINNERS, COLLECTIVES]
