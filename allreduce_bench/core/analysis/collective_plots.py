"""Figures of the collectives beside AllReduce: bandwidth and latency against size, and the peaks."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.collective_tables import (
    IN_PLACE_LABEL,
    best_per_collective,
    collective_rows,
    named_halves,
)
from allreduce_bench.core.analysis.style import legend, log_y_axis, plt, save, size_axis
from allreduce_bench.core.metrics import COLLECTIVES

SIZE_LABEL = "buffer size (bytes, nccl-tests' size)"


def size_figure(rows: pd.DataFrame, collective: str, column: str, ylabel: str, logy: bool):
    """`column` against size for one collective: a panel per world size, a line per algorithm."""
    world_sizes = sorted(rows["world_size"].unique())
    fig, axes = plt.subplots(1, len(world_sizes), figsize=(5 * len(world_sizes), 4), squeeze=False)
    for ax, world_size in zip(axes[0], world_sizes):
        at = rows[rows["world_size"] == world_size]
        colors: dict[str, str] = {}  # an in-place half in its out-of-place line's colour, dashed
        for algorithm, line in at.groupby("algorithm", sort=False):
            curve = line.groupby("size_bytes")[column].median()
            ran = line["runs_as"].iloc[0]
            base = algorithm.removesuffix(IN_PLACE_LABEL)
            drawn = ax.plot(curve.index, curve.values, marker="o", markersize=3, color=colors.get(base),
                            linestyle="--" if base != algorithm else "-",
                            label=f"{algorithm} (ran {ran})" if ran else algorithm)
            colors.setdefault(base, drawn[0].get_color())
        size_axis(ax)
        ax.set_xlabel(SIZE_LABEL)
        if logy:
            log_y_axis(ax)
        ax.set_title(f"{collective}, N = {world_size}", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def peak_figure(frame: pd.DataFrame):
    """Grouped bars: per collective, the peak busbw per world size, labelled with the algorithm."""
    best = best_per_collective(frame)
    if best.empty:
        return None
    names = [c for c in COLLECTIVES if c in set(best["collective"])]
    world_sizes = sorted(best["world_size"].unique())
    width = 0.8 / len(world_sizes)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(names)), 4.2))
    for i, world_size in enumerate(world_sizes):
        at = best[best["world_size"] == world_size].set_index("collective").reindex(names)
        xs = [j + (i - (len(world_sizes) - 1) / 2) * width for j in range(len(names))]
        bars = ax.bar(xs, at["busbw_GBps"].fillna(0), width, label=f"N = {world_size}")
        for bar, algorithm in zip(bars, at["algorithm"].fillna("")):
            ax.annotate(algorithm, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("peak busbw (GB/s)")
    ax.set_title("Peak bus bandwidth per collective (best algorithm on each bar)")
    ax.grid(True, axis="y", alpha=0.3)
    legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def draw(frame: pd.DataFrame, out_dir: Path, fmt: str = "png") -> dict[str, Path]:
    """Save the collectives' figures as out_dir/<name>.<fmt>; name -> path."""
    rows = named_halves(collective_rows(frame, in_place=True)).dropna(subset=["busbw_GBps", "time_us_median"])
    if rows.empty:
        return {}
    drawn: dict[str, Path] = {}
    for collective in [c for c in COLLECTIVES if c in set(rows["collective"])]:
        at = rows[rows["collective"] == collective]
        drawn[f"bandwidth_{collective}"] = save(size_figure(at, collective, "busbw_GBps", "busbw (GB/s)", False),
                                                out_dir / f"bandwidth_{collective}.{fmt}")
        drawn[f"latency_{collective}"] = save(size_figure(at, collective, "time_us_median", "time (us)", True),
                                              out_dir / f"latency_{collective}.{fmt}")
    drawn["collectives_peak"] = save(peak_figure(frame), out_dir / f"collectives_peak.{fmt}")
    return drawn
