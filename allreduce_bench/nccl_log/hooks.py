"""What nccl_log lends the core: report.md's "What NCCL set up", and `--nccl-debug`'s files read
into meta.json once the ranks have ended."""
from __future__ import annotations

from typing import Any

from allreduce_bench.core.hooks import Section, hookimpl


def nccl_parts(frame, out_dir=None, figures=None) -> list[str]:
    from allreduce_bench.core.analysis.tables import run_metas
    from allreduce_bench.nccl_log.setup import report_parts

    return report_parts(run_metas(frame))  # per host NICs, transports, who differs


@hookimpl
def report_sections() -> list[Section]:
    return [Section("nccl", nccl_parts)]


@hookimpl
def after_ranks(config: Any) -> None:
    if config.launch.nccl_debug:
        from allreduce_bench.nccl_log.record import record
        record(config.launch.out_dir)
