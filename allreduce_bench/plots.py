"""Figures drawn from a results DataFrame alone: anyone can redraw them from results/."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from .sizes import format_size  # noqa: E402
from .summary import allreduce_rows  # noqa: E402


def size_axis(ax) -> None:
    """log2 size axis labelled 1K, 1M, 1G."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(x)))
    ax.set_xlabel("tensor size per rank (bytes)")


def bandwidth_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path:
    """busbw against size, one line per algorithm, one panel per world size."""
    frame = allreduce_rows(frame)
    world_sizes = sorted(frame["world_size"].unique())
    fig, axes = plt.subplots(1, len(world_sizes), figsize=(5.5 * len(world_sizes), 4.2),
                             squeeze=False, sharey=True)
    for ax, world_size in zip(axes[0], world_sizes):
        rows = frame[frame["world_size"] == world_size]
        for algorithm, lines in rows.groupby("algorithm", sort=False):
            points = lines.groupby("size_bytes")["busbw_GBps"].median()
            ax.plot(points.index, points.values, marker="o", markersize=3, label=algorithm)
        size_axis(ax)
        ax.set_title(f"world size {world_size}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(title="algorithm", fontsize=8)
    axes[0][0].set_ylabel("busbw (GB/s)")
    fig.suptitle("AllReduce bus bandwidth")
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, alpha=0.7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def footnote_from_meta(meta: dict) -> str:
    hosts = sorted(set(meta.get("hostnames", []))) or ["?"]
    return (f"backend {meta.get('backend', '?')}, device {meta.get('device_name', meta.get('device', '?'))}, "
            f"hosts {', '.join(hosts)}, {meta.get('started', '')}")
