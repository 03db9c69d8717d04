"""The links benchmark's numbers and figure from rows alone: intra- vs inter-node busbw, the
table it lends report.md and the figure it lends plots/ (links/hooks.py)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.tables import algorithm_rank, label_runs
from allreduce_bench.core.units import format_size

LINKS = ("intra", "inter")


def links_summary(frame, meta: dict) -> str:
    """busbw intra vs inter per operation and size, and why rows are unstable in `run`'s words."""
    from allreduce_bench.core.analysis.advice import unstable_line

    frame = frame[frame["benchmark"] == "links"]
    # advice counts `run`'s rows, each of its world size: here every rank runs while one group measures
    unstable = unstable_line(frame.assign(benchmark="allreduce", world_size=frame["nodes"] * frame["ranks_per_node"]),
                             meta)
    lines = ["busbw (GB/s) intra vs inter:"]
    for operation, rows in frame.groupby("operation"):
        table = rows.pivot_table(index="size_bytes", columns="link", values="busbw_GBps",
                                 aggfunc="median")
        if {"intra", "inter"} <= set(table.columns):
            table["intra/inter"] = table["intra"] / table["inter"]
        lines.append(f"{operation}:\n{table.round(4).to_string()}")
    lines += [unstable] if unstable else []
    lines.append(f"#wrong in total: {int(frame['wrong'].sum())}")
    return "\n".join(lines)


def has_links(frame: pd.DataFrame) -> bool:
    return "link" in frame.columns and frame["link"].isin(LINKS).any()


def link_ratio(frame: pd.DataFrame) -> pd.DataFrame:
    """busbw(intra) / busbw(inter) at the largest size both links measured, per (run, algorithm, world_size)."""
    rows = []
    if has_links(frame):
        frame = label_runs(frame)
        frame = frame[frame["link"].isin(LINKS)].dropna(subset=["busbw_GBps"])
        points = frame.groupby(["run", "algorithm", "world_size", "link", "size_bytes"])[
            "busbw_GBps"].median()
        for key, curve in points.groupby(level=["run", "algorithm", "world_size"]):
            curve = curve.droplevel(["run", "algorithm", "world_size"])
            if set(LINKS) <= set(curve.index.get_level_values("link")):
                common = curve["intra"].index.intersection(curve["inter"].index)
                if len(common):
                    size = common.max()
                    intra, inter = curve["intra"][size], curve["inter"][size]
                    rows.append((*key, int(size), intra, inter, intra / inter))
    return pd.DataFrame(rows, columns=["run", "algorithm", "world_size", "size_bytes",
                                       "intra_busbw_GBps", "inter_busbw_GBps", "intra_inter_ratio"]
                        ).set_index(["run", "algorithm", "world_size"])


def links_table(frame: pd.DataFrame, size_bytes: int) -> list:
    """report.md's table of the links (none without intra and inter rows)."""
    from allreduce_bench.core.analysis.report import WORLD, readable

    links = link_ratio(frame)
    if not len(links):
        return []
    return [(
        "Intra- vs inter-node links",
        "busbw over each link at the largest size both measured, and intra/inter.",
        readable(pd.DataFrame({
            "size": links["size_bytes"].map(format_size),
            "intra busbw (GB/s)": links["intra_busbw_GBps"].map(lambda x: f"{x:.3g}"),
            "inter busbw (GB/s)": links["inter_busbw_GBps"].map(lambda x: f"{x:.3g}"),
            "intra/inter": links["intra_inter_ratio"].map(lambda x: f"{x:.2f}")}), WORLD))]


def links_figure(frame: pd.DataFrame, footnote: str = ""):
    """busbw over intra-node and inter-node links against size, with intra/inter written on."""
    from allreduce_bench.core.analysis.plots import Styles, finish_figure, panels, world_title
    from allreduce_bench.core.analysis.style import MARKERS, legend, size_axis

    if not has_links(frame):
        return None
    frame = label_runs(frame)
    frame = frame[frame["link"].isin(LINKS)].dropna(subset=["busbw_GBps"])
    points = frame.groupby(["world_size", "run", "algorithm", "link", "size_bytes"])[
        "busbw_GBps"].median()
    ratios = link_ratio(frame)
    styles = Styles(frame)
    runs = sorted(set(frame["run"]))
    world_sizes = sorted(points.index.get_level_values("world_size").unique())
    fig, axes = panels(len(world_sizes), "Intra-node against inter-node bus bandwidth")
    for ax, world_size in zip(axes, world_sizes):
        at = points.xs(world_size, level="world_size")
        pairs = sorted(set(zip(at.index.get_level_values("run"),
                               at.index.get_level_values("algorithm"))),
                       key=lambda p: (p[0], algorithm_rank(p[1])))
        for run, algorithm in pairs:
            for link, linestyle in zip(LINKS, ("-", "--")):
                if (run, algorithm, link) not in at.index.droplevel("size_bytes"):
                    continue
                curve = at.loc[(run, algorithm, link)]
                who = f"{algorithm} [{run}]" if len(runs) > 1 else algorithm
                ax.plot(curve.index, curve.values, color=styles.colours.get(algorithm, "black"),
                        linestyle=linestyle, marker=MARKERS[runs.index(run) % 6], markersize=3,
                        label=f"{who}, {link}")
        notes = [f"{(f'{a} [{r}]' if len(runs) > 1 else a)}: {row.intra_inter_ratio:.1f}x at "
                 f"{format_size(row.size_bytes)}"
                 for (r, a, n), row in ratios.iterrows() if n == world_size]
        if notes:
            ax.text(0.02, 0.98, "intra/inter busbw\n" + "\n".join(notes), transform=ax.transAxes,
                    va="top", fontsize=8, bbox=dict(boxstyle="round", facecolor="white", alpha=0.8))
        size_axis(ax)
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(world_title(frame, world_size), fontsize=10)
        ax.grid(True, alpha=0.3)
        legend(ax, fontsize=7, loc="lower right")
    return finish_figure(fig, footnote)


def draw_links(frame, plots_dir: Path, fmt: str = "png", footnote: str | None = None) -> dict[str, Path]:
    """plots/links.<fmt>: intra- and inter-node busbw against size ({} without links rows)."""
    from allreduce_bench.core.analysis.style import save
    from allreduce_bench.core.analysis.tables import footnote as run_footnote

    fig = links_figure(frame, run_footnote(frame) if footnote is None else footnote)
    return {} if fig is None else {"links": save(fig, Path(plots_dir) / f"links.{fmt}")}
