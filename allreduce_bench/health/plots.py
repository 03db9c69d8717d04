"""plots/health.png and report.md's section, drawn from health.json only."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.analysis.style import plt, save
from allreduce_bench.core.units import format_size

COLOURS = {"ok": "#4c72b0", "slow": "#dd8452", "bad": "#c44e52", "unreachable": "#8c8c8c", "dead": "#000000",
           "not judged": "#dddddd"}
FIGURE = "health.png"


def _bars(ax, rows: list[dict], labels: list[str], title: str) -> None:
    """Each bar: measured / expected at its worst size; its tick: the threshold there."""
    def share(row, key):
        return 100.0 * (row.get(key) or 0.0) / row["expected_GBps"] if row.get("expected_GBps") else 0.0

    x = range(len(rows))
    ax.bar(x, [share(r, "measured_GBps") for r in rows], color=[COLOURS[r["verdict"]] for r in rows])
    ax.scatter(x, [share(r, "threshold_GBps") for r in rows], marker="_", s=200, color="black",
               label="threshold (under it: slow)", zorder=3)
    ax.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_xticks(list(x), labels, rotation=90 if len(rows) > 12 else 0, fontsize=7)
    ax.set_ylabel("busbw, % of expected")
    ax.set_title(title, fontsize=9)


def _matrix(doc: dict, size_bytes: int):
    hosts = [h["host"] for h in doc["hosts"]]
    index = {h: i for i, h in enumerate(hosts)}
    grid = [[float("nan")] * len(hosts) for _ in hosts]
    for p in doc["pairs"]:
        value = p.get("busbw_GBps", {}).get(str(size_bytes))
        if value is not None:
            a, b = (index[h] for h in p["hosts"])
            grid[a][b] = grid[b][a] = value
    return hosts, grid


def draw_health(doc: dict, out_dir: Path) -> Path:
    """Busbw against the threshold per host (and rail) by verdict; with --pairs all the pair heatmap."""
    hosts = doc["hosts"]
    size = max(doc["layout"]["sizes"])
    panels = [("hosts", hosts, [h["host"] for h in hosts])]
    if doc["rails"]:
        panels.append(("rails", doc["rails"], [f"{r['host']}:{r['rail']}" for r in doc["rails"]]))
    heatmap = doc["layout"].get("pairs") == "all" and len(hosts) > 1
    count = len(panels) + heatmap
    fig, axes = plt.subplots(count, 1, figsize=(max(6.0, 0.25 * len(hosts) + 3), 3.2 * count), squeeze=False)
    for ax, (name, rows, labels) in zip(axes[:, 0], panels):
        _bars(ax, rows, labels, f"{name}: busbw at the worst size vs its threshold "
                                f"(colour: {', '.join(COLOURS)})")
    if heatmap:
        ax = axes[-1, 0]
        names, grid = _matrix(doc, size)
        image = ax.imshow(grid, cmap="viridis")
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        ax.set_yticks(range(len(names)), names, fontsize=6)
        fig.colorbar(image, ax=ax, label="pair busbw (GB/s)")
        ax.set_title(f"every pair's AllReduce busbw at {size} B", fontsize=9)
    fig.tight_layout()
    return save(fig, Path(out_dir) / FIGURE)


def report_section(doc: dict, figure: Path | None, base: Path) -> str:
    """report.md's health section: the verdict table and the figure."""
    lines = ["## Health", "", f"{len(doc['hosts'])} host(s), exit code {doc['exit_code']}"
             + (f", exclude `{doc['exclude']}`" if doc["exclude"] else ", nothing to exclude"), "",
             "Busbw at the bandwidth size (the largest), or for a host found slow at the size it "
             "was slow at.", "",
             markdown_table(pd.DataFrame(
                 [[h["host"], h["verdict"], "-" if h.get("size_bytes") is None else format_size(h["size_bytes"]),
                   _number(h.get("measured_GBps")), _number(h.get("expected_GBps")),
                   ", ".join(h["partners"]) or "-", h["why"]] for h in doc["hosts"]],
                 columns=["host", "verdict", "size", "measured GB/s", "expected GB/s", "partners", "why"]))]
    if figure is not None:
        lines += ["", f"![health]({Path(figure).relative_to(base).as_posix()})"]
    return "\n".join(lines) + "\n"


def _number(value) -> str:
    return "-" if value is None else f"{value:.3g}"
