"""DDP figures, drawn from a results DataFrame alone (see ddp_analysis for the definitions)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from allreduce_bench.core.analysis.style import legend, save, save_with_footnote  # noqa: E402
from allreduce_bench.ddp.analysis import (  # noqa: E402
    accumulation_table,
    median_iteration,
    overlap_table,
    timeline_of,
)


def overlap_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path | None:
    """Per world size, a bar per bucket cap: the DDP step as compute alone, compute hiding comm, exposed comm."""
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
    legend(axes[0][0], fontsize=7, loc="upper left")
    fig.suptitle("DDP step: compute, hidden and exposed communication")
    return save_with_footnote(fig, Path(path), footnote)


def accumulation_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path | None:
    """Per world size: time per optimizer step syncing every micro-batch vs no_sync, AllReduce calls on each."""
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
    legend(ax, fontsize=7)
    return save_with_footnote(fig, Path(path), footnote)


COMPUTE_COLOURS = {"forward": "tab:blue", "backward": "tab:blue", "optimizer": "tab:purple"}
COMPUTE_ALPHA = {"forward": 0.5, "backward": 1.0, "optimizer": 1.0}
LANES = (("step", "DDP: compute"), ("step", "DDP: AllReduce"),
         ("no_overlap", "wait-then-AllReduce: compute"), ("no_overlap", "wait-then-AllReduce: AllReduce"))


def _draw_step(ax, spans: pd.DataFrame, compute_y: float, comm_y: float, height: float) -> None:
    """One measured step: compute spans on its lane, each bucket's AllReduce on a sub-row of the comm lane."""
    to_ms = 1e-3
    for row in spans[spans["span"] != "allreduce"].itertuples():
        ax.broken_barh([(row.start_us * to_ms, (row.end_us - row.start_us) * to_ms)],
                       (compute_y - height / 2, height), color=COMPUTE_COLOURS.get(row.span, "grey"),
                       alpha=COMPUTE_ALPHA.get(row.span, 1.0), label=row.span)
    comm = spans[spans["span"] == "allreduce"].sort_values("start_us")
    rows = max(1, len(comm))
    sub = height / rows
    for k, row in enumerate(comm.itertuples()):
        y = comm_y + height / 2 - (k + 1) * sub
        ax.broken_barh([(row.start_us * to_ms, (row.end_us - row.start_us) * to_ms)], (y, sub * 0.9),
                       color="tab:orange" if k % 2 == 0 else "tab:red", label="allreduce")
        if rows <= 12:
            ax.annotate(f"b{k + 1}", (row.start_us * to_ms, y + sub * 0.45), fontsize=6,
                        va="center", ha="right")
    ax.axvline(spans["step_us"].iloc[0] * to_ms, color="black", linewidth=0.6, linestyle=":")


def timeline_plot(timeline: pd.DataFrame, table: pd.DataFrame | None = None, footnote: str = ""):
    """The seed's diagram, measured: per bucket cap of the largest world size, the slowest rank's median DDP
    and wait-then-AllReduce steps, computation over AllReduces; None without a timeline."""
    if timeline.empty:
        return None
    world_size = timeline["world_size"].max()
    timeline = timeline[timeline["world_size"] == world_size]
    caps = sorted(timeline["bucket_mb"].unique())
    fig, axes = plt.subplots(len(caps), 1, figsize=(9, 1.0 + 1.9 * len(caps)), squeeze=False,
                             sharex=True)
    height = 0.8
    for ax, cap in zip(axes[:, 0], caps):
        at = timeline[timeline["bucket_mb"] == cap]
        title = f"bucket cap {cap:g} MiB"
        for lane, measure in ((0, "step"), (2, "no_overlap")):
            spans = at[at["measure"] == measure]
            if spans.empty:
                continue
            spans = median_iteration(spans)
            buckets = int((spans["span"] == "allreduce").sum())
            _draw_step(ax, spans, 3 - lane, 2 - lane, height)
            what = "DDP" if measure == "step" else "wait-then-AllReduce"
            title += f"; {what} {spans['step_us'].iloc[0] / 1e3:.0f} ms" + (
                f" ({buckets} bucket{'s' if buckets != 1 else ''})" if measure == "step" else "")
        if table is not None and not table.empty:
            match = table[(table["world_size"] == world_size) & (table["bucket_mb"] == cap)]
            if not match.empty:
                title += f"; hidden {match['hidden_share'].iloc[0]:.0%} (medians)"
        ax.set_yticks([3, 2, 1, 0], [label for _, label in LANES], fontsize=7)
        ax.set_ylim(-0.6, 3.6)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time since the step started (ms); dotted: step end")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[0, 0].legend(unique.values(), unique.keys(), fontsize=7, loc="upper right", ncol=4)
    ranks = sorted(timeline["rank"].unique())
    fig.suptitle(f"DDP step timeline, measured: world size {world_size}, slowest rank "
                 f"({', '.join(map(str, ranks))})")
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, alpha=0.7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def timeline_figure(frame: pd.DataFrame, path: Path, footnote: str = "") -> Path | None:
    """timeline_plot of the ddp_timeline recorded with the frame's runs, saved to `path`."""
    fig = timeline_plot(timeline_of(frame), overlap_table(frame), footnote)
    return save(fig, Path(path)) if fig is not None else None
