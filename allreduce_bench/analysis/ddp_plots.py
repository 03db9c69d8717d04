"""DDP figures, drawn from a results DataFrame alone (see ddp_analysis for the definitions)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from allreduce_bench.analysis.ddp import accumulation_table, overlap_table  # noqa: E402
from allreduce_bench.analysis.style import save  # noqa: E402


def _save(fig, path: Path, footnote: str) -> Path:
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, alpha=0.7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save(fig, path)


def overlap_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path | None:
    """Per world size, one bar per bucket cap: the DDP step split into compute alone, compute
    with communication hidden behind it, and exposed communication; predicted step as a dot."""
    table = overlap_table(frame)
    if table.empty:
        return None
    world_sizes = sorted(table["world_size"].unique())
    fig, axes = plt.subplots(1, len(world_sizes), figsize=(5.2 * len(world_sizes), 4.2),
                             squeeze=False, sharey=True)
    for ax, world_size in zip(axes[0], world_sizes):
        rows = table[table["world_size"] == world_size].sort_values("bucket_mb")
        x = range(len(rows))
        to_ms = 1e-3
        hidden = rows[["hidden_us", "compute_us"]].min(axis=1) * to_ms
        alone = rows["compute_us"] * to_ms - hidden
        exposed = rows["exposed_us"] * to_ms
        ax.bar(x, alone, color="tab:blue", label="compute, no comm alongside")
        ax.bar(x, hidden, bottom=alone, color="tab:blue", alpha=0.45, hatch="//",
               label="compute with comm hidden behind it")
        ax.bar(x, exposed, bottom=alone + hidden, color="tab:red", label="exposed comm = step - compute")
        ax.plot(x, rows["predicted_us"] * to_ms, "k^", label="model: predicted step")
        ax.plot(x, rows["comm_us"] * to_ms, "_", color="tab:orange", markersize=18,
                markeredgewidth=2, label="comm alone")
        ax.set_xticks(list(x), [f"{b:g}" for b in rows["bucket_mb"]])
        ax.set_xlabel("DDP bucket cap (MiB)")
        ax.set_title(f"world size {world_size}")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("time per step (ms)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("DDP step: compute, hidden and exposed communication")
    return _save(fig, Path(path), footnote)


def accumulation_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path | None:
    """Per world size: time per optimizer step syncing every micro-batch vs no_sync, with the
    hook-counted AllReduce calls written on each bar."""
    table = accumulation_table(frame)
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(2.6 + 2.2 * len(table), 4.2))
    width = 0.38
    for i, r in enumerate(table.itertuples()):
        for offset, label, value, calls, color in (
                (-width / 2, "sync every micro-batch", r.sync_us, (r.sync_calls, r.sync_bytes),
                 "tab:red"),
                (width / 2, "no_sync on all but the last", r.no_sync_us,
                 (r.no_sync_calls, r.no_sync_bytes), "tab:green")):
            ax.bar(i + offset, value / 1e3, width, color=color, label=label if i == 0 else None)
            ax.annotate(f"{calls[0]} AllReduce\n{calls[1] / 1e6:.0f} MB", (i + offset, value / 1e3),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(table)),
                  [f"N={r.world_size}, K={r.accum}\nsaving {r.saving:.0%}" for r in table.itertuples()])
    ax.set_ylabel("time per optimizer step (ms)")
    ax.set_title("Gradient accumulation with and without no_sync()")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, Path(path), footnote)
