"""report.md's and report.html's "Is this normal?" (lent to the core as Extensions.sections) and
the terminal summary's lines (Extensions.summaries)."""
from __future__ import annotations

from allreduce_bench.core.analysis.report import markdown_table
from allreduce_bench.core.extensions import Section
from allreduce_bench.expect import verdict

NOTE = ("Each run's peak busbw as a share of the closest published figure for the same GPU, "
        "collective and layout (the `expect` catalogue: measurements, operators' health-check "
        "thresholds, maintainers' figures, each with its source and date) and of the link limit "
        "(the NVLink rate on one node; across nodes the node's NICs together: doc/methodology.md). "
        "Where it falls short, the checks below come from what the run recorded.")


def parts(frame, out_dir=None, figures=None) -> list[str]:
    table, checks = verdict.table(frame)
    if table.empty:
        return []
    return ["## Is this normal?", "", NOTE, "", markdown_table(table), "", *(f"- {c}" for c in checks),
            *([""] if checks else [])]


SECTION = Section("expect", parts)
summary_lines = verdict.summary_lines
