"""Figures of the cost model: fit against measurements, and DDP efficiency against GPU count."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.core.analysis.style import legend, plt, save_with_footnote, size_axis
from allreduce_bench.model.cost import CostModel


def model_figure(comparison: pd.DataFrame, model: CostModel, path: Path, footnote: str = "") -> Path:
    """Measured median times (points) and the fitted model (lines), one panel per layout."""
    layouts = comparison[["world_size", "nodes", "ranks_per_node"]].drop_duplicates().sort_values("world_size")
    fig, axes = plt.subplots(1, len(layouts), figsize=(5.5 * len(layouts), 4.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, layout in zip(axes[0], layouts.itertuples()):
        # a zero-byte row (nccl-tests prints one) has no place on a log axis
        rows = comparison[(comparison["world_size"] == layout.world_size)
                          & (comparison["size_bytes"] > 0)]
        if rows.empty:
            continue
        dense = np.geomspace(rows["size_bytes"].min(), rows["size_bytes"].max(), 60)
        for i, (algorithm, points) in enumerate(rows.groupby("algorithm", sort=False)):
            color = colors[i % len(colors)]
            ax.plot(points["size_bytes"], points["measured_us"] / 1e3, "o", color=color, markersize=4,
                    label=f"{algorithm} measured")
            line = [model.time(algorithm, s, layout.world_size, layout.ranks_per_node) * 1e3 for s in dense]
            ax.plot(dense, line, "-", color=color, alpha=0.8, label=f"{algorithm} model")
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_title(f"world size {layout.world_size} ({layout.nodes} node(s) x "
                     f"{layout.ranks_per_node} ranks)")
        ax.grid(True, which="both", alpha=0.3)
        legend(ax, fontsize=7, ncol=2)
    axes[0][0].set_ylabel("time per AllReduce (ms)")
    fig.suptitle("alpha-beta model (lines) fitted to the measured medians (points)")
    return save_with_footnote(fig, path, footnote)


def scaling_figure(table: pd.DataFrame, path: Path, title: str, footnote: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(table["gpus"], 100 * table["efficiency"], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xticks(table["gpus"], [str(g) for g in table["gpus"]])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("scaling efficiency = compute / step (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return save_with_footnote(fig, path, footnote)


def winners_figure(best: pd.DataFrame, path: Path, footnote: str = "") -> Path:
    """The fastest algorithm at each size, measured (top) and predicted (bottom), a panel per world size."""
    world_sizes = sorted(best["world_size"].unique())
    names = list(dict.fromkeys(list(best["measured"]) + list(best["predicted"])))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {name: colors[i % len(colors)] for i, name in enumerate(names)}
    fig, axes = plt.subplots(len(world_sizes), 1, figsize=(7, 1.6 + 1.2 * len(world_sizes)),
                             squeeze=False)
    for ax, world_size in zip(axes[:, 0], world_sizes):
        rows = best[best["world_size"] == world_size]
        for y, column in ((1, "measured"), (0, "predicted")):
            ax.scatter(rows["size_bytes"], [y] * len(rows), s=120, marker="s",
                       c=[color[a] for a in rows[column]])
        size_axis(ax)
        ax.set_yticks([0, 1], ["predicted", "measured"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(f"fastest algorithm, world size {world_size}", fontsize=9)
    handles = [plt.Line2D([], [], marker="s", linestyle="", color=color[n], label=n) for n in names]
    fig.legend(handles=handles, loc="upper right", fontsize=7)
    return save_with_footnote(fig, path, footnote, right=0.82)
