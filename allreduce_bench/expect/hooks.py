"""What expect lends the core: the reports' "Is this normal?", `run`'s summary lines and
`run --expect`'s first line."""
from __future__ import annotations

from typing import Any

from allreduce_bench.core.hooks import Section, hookimpl

NOTE = ("Each run's peak busbw as a share of the closest published figure for the same GPU, "
        "collective and layout (the `expect` catalogue: measurements, operators' health-check "
        "thresholds, maintainers' figures, each with its source and date) and of the link limit "
        "(the NVLink rate on one node; across nodes the node's NICs together: doc/methodology.md). "
        "Where it falls short, the last column's checks come from what the run recorded.")


def tables(frame, size_bytes=None) -> list:
    from allreduce_bench.expect import verdict

    table = verdict.table(frame)
    return [] if table.empty else [("Is this normal?", NOTE, table)]


@hookimpl
def report_sections() -> list[Section]:
    return [Section("expect", tables=tables)]


@hookimpl
def summary_lines(frame: Any) -> list[str]:
    from allreduce_bench.expect import verdict
    return verdict.summary_lines(frame)


@hookimpl
def expect_line(config: Any) -> str | None:
    from allreduce_bench.expect.cli import run_headline
    return run_headline(config)
