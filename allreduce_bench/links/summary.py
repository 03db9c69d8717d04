"""The links benchmark's numbers: intra- vs inter-node busbw from rows alone, and its figure."""
from __future__ import annotations

from pathlib import Path

LINKS_FIGURE = "links.png"


def links_summary(frame) -> str:
    """busbw intra vs inter per operation at the largest size: what the links figure shows."""
    frame = frame[frame["benchmark"] == "links"]
    lines = ["busbw (GB/s) intra vs inter:"]
    for operation, rows in frame.groupby("operation"):
        table = rows.pivot_table(index="size_bytes", columns="link", values="busbw_GBps",
                                 aggfunc="median")
        if {"intra", "inter"} <= set(table.columns):
            table["intra/inter"] = table["intra"] / table["inter"]
        lines.append(f"{operation}:\n{table.round(4).to_string()}")
    lines.append(f"#wrong in total: {int(frame['wrong'].sum())}")
    return "\n".join(lines)


def draw_links(frame, plots_dir: Path) -> Path | None:
    """plots/links.png: intra- and inter-node busbw against size (None: no links rows). Only
    this figure: a run's report.md and figures beside it (emulate's allreduce) stay as they are."""
    from allreduce_bench.core.analysis.plots import links_figure
    from allreduce_bench.core.analysis.style import save
    from allreduce_bench.core.analysis.tables import footnote

    fig = links_figure(frame, footnote(frame))
    return None if fig is None else save(fig, Path(plots_dir) / LINKS_FIGURE)
