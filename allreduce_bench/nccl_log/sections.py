"""report.md's "What NCCL set up" (lent to the core as Extensions.sections), for every run whose
meta.json has an `nccl` block (from `--nccl-debug` or an imported log)."""
from __future__ import annotations

from allreduce_bench.core.analysis.tables import run_metas
from allreduce_bench.core.extensions import Section
from allreduce_bench.nccl_log.setup import report_parts


def nccl_parts(frame, out_dir=None, figures=None) -> list[str]:
    return report_parts(run_metas(frame))  # per host NICs, transports, who differs


SECTION = Section("nccl", nccl_parts)
