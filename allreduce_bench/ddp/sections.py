"""DDP's section of report.md and its figures (its `report_sections` hook), from `benchmark = ddp` rows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.tables import run_metas
from allreduce_bench.core.hooks import Section
from allreduce_bench.ddp.analysis import ddp_markdown, ddp_rows

FIGURES = ("ddp_overlap", "ddp_timeline", "ddp_accumulation")


def draw_ddp(frame: pd.DataFrame, out_dir: Path, fmt: str, note: str) -> dict[str, Path]:
    """plots/ddp_*.<fmt> where the rows hold DDP measurements."""
    rows = ddp_rows(frame)
    if rows.empty:
        return {}
    from allreduce_bench.ddp.plots import accumulation_figure, overlap_figure, timeline_figure

    drawn = {}
    for name, draw in zip(FIGURES, (overlap_figure, timeline_figure, accumulation_figure)):
        if path := draw(rows, Path(out_dir) / f"{name}.{fmt}", note):
            drawn[name] = path
    return drawn


def ddp_parts(frame: pd.DataFrame, out_dir: Path, figures=None) -> list[str]:
    """The DDP section where the rows hold `benchmark = ddp` measurements."""
    rows = ddp_rows(frame)
    if rows.empty:
        return []
    meta = next(iter(run_metas(rows).values()), {})
    files = {name: file for name, file in (("overlap", "ddp_overlap.png"),
                                           ("timeline", "ddp_timeline.png"),
                                           ("accumulation", "ddp_accumulation.png"))
             if (Path(out_dir) / file).exists()}
    return [ddp_markdown(rows, meta, files)]


def embedded(name: str) -> bool:
    return name in FIGURES  # ddp_markdown places them itself


# its rows are read by what `measure` each timed; its meta.json's `ddp` block marks its runs
SECTION = Section("ddp", ddp_parts, draw_ddp, embedded, benchmarks=("ddp",))
