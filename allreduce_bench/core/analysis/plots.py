"""Figures drawn from results rows alone, so anyone can redraw them from results/; colours name
algorithms and line styles series, the same in every figure."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import pandas as pd  # noqa: E402

from allreduce_bench.core.analysis import collective_plots  # noqa: E402
from allreduce_bench.core.analysis.style import (  # noqa: E402
    LINE_STYLES,
    MARKERS,
    legend,
    log_y_axis,
    plt,
    quiet_layout,
    save,
    size_axis,
    world_size_axis,
)
from allreduce_bench.core.analysis.tables import (  # noqa: E402
    algorithm_rank,
    chosen_size,
    curves,
    footnote,
    label_runs,
    scaling_efficiency,
)
from allreduce_bench.core.units import format_size  # noqa: E402

# 10 hues, each a dark then a light shade (tab20 is a ListedColormap, typed as any Colormap)
PAIRED = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]


class Styles:
    """Colour per algorithm, line style and marker per series; several series of one algorithm
    take its hue's dark and light shade in turn."""

    def __init__(self, frame: pd.DataFrame):
        ordered = sorted(set(frame["algorithm"].astype(str)), key=algorithm_rank)
        cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.colours = {a: cycle[i % len(cycle)] for i, a in enumerate(ordered)}
        # named as the curves name them (their AllReduce rows only): a run whose other rows
        # (links' intra/inter) carry another run id would otherwise rename its series
        points = curves(frame)
        self.series = sorted(set(points.index.get_level_values("series") if len(points)
                                 else label_runs(frame)["series"]))

    def order(self, points: pd.DataFrame) -> list[tuple[str, str]]:
        """(series, algorithm) pairs in `points` in one order, so legends read the same everywhere."""
        pairs = set(zip(points.index.get_level_values("series"),
                        points.index.get_level_values("algorithm")))
        rank = {a: i for i, a in enumerate(self.colours)}
        return sorted(pairs, key=lambda p: (self.series.index(p[0]) if p[0] in self.series else 0,
                                            rank.get(p[1], len(rank))))

    def __call__(self, algorithm: str, series: str = "") -> dict:
        i = self.series.index(series) if series in self.series else 0
        label = f"{algorithm} [{series}]" if len(self.series) > 1 and series else algorithm
        return dict(color=self.colour(algorithm, i), linestyle=LINE_STYLES[i % 6],
                    marker=MARKERS[i % 6], markersize=3, label=label)

    def colour(self, algorithm: str, series_index: int = 0):
        if algorithm not in self.colours:
            return "black"
        if len(self.series) < 2:
            return self.colours[algorithm]
        hue = list(self.colours).index(algorithm) % (len(PAIRED) // 2)
        return PAIRED[2 * hue + series_index % 2]


def panels(count: int, title: str, width: float = 5.0, height: float = 3.8):
    columns = min(count, 3)
    rows = -(-count // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(width * columns, height * rows + 0.6),
                             squeeze=False)
    axes = list(grid.flat)
    for ax in axes[count:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, axes[:count]


FOOTNOTE_POINTS = 7


def fit_footnote(note: str, width_in: float) -> str:
    """Each line of `note` wrapped to a figure `width_in` inches wide (~0.6 em per character)."""
    chars = max(40, int(width_in * 72 / (0.6 * FOOTNOTE_POINTS)))
    return "\n".join(textwrap.fill(line, chars, subsequent_indent="  ") for line in note.splitlines())


def finish_figure(fig, note: str):
    """The footnote under the axes, and a layout that leaves room for it."""
    note = fit_footnote(note, fig.get_figwidth()) if note else note
    lines = note.count("\n") + 1 if note else 0
    if note:
        fig.text(0.01, 0.01, note, fontsize=FOOTNOTE_POINTS, alpha=0.75, va="bottom", ha="left")
    bottom = (0.06 + 0.15 * lines) / fig.get_figheight()
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def world_title(frame: pd.DataFrame, world_size: int) -> str:
    rows = frame[frame["world_size"] == world_size]
    if {"nodes", "ranks_per_node"} <= set(rows.columns):
        # the first row that has both (a damaged file may leave one empty)
        known = rows[["nodes", "ranks_per_node"]].dropna()
        if len(known):
            return (f"N = {world_size} ({int(known['nodes'].iloc[0])} node(s) x "
                    f"{int(known['ranks_per_node'].iloc[0])} ranks)")
    return f"N = {world_size}"


def _per_world_size(frame, title, ylabel, draw, note, logy=False, reference=None):
    points = curves(frame)
    if points.empty:
        return None
    styles = Styles(frame)
    world_sizes = sorted(points.index.get_level_values("world_size").unique())
    fig, axes = panels(len(world_sizes), title)
    for ax, world_size in zip(axes, world_sizes):
        at = points.xs(world_size, level="world_size")
        for series, algorithm in styles.order(at):
            curve = at.loc[(series, algorithm)]
            draw(ax, curve, styles(algorithm, series), algorithm, series, at)
        if reference is not None:
            ax.axhline(reference, color="grey", linewidth=0.8, linestyle="--")
        size_axis(ax)
        if logy:
            log_y_axis(ax)
        ax.set_title(world_title(frame, world_size), fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_lines():
            legend(ax, fontsize=7)
    return finish_figure(fig, note)


def bandwidth_figure(frame: pd.DataFrame, footnote: str = ""):
    def draw(ax, curve, style, *_):
        ax.plot(curve.index, curve["busbw_GBps"], **style)
    return _per_world_size(frame, "AllReduce bus bandwidth against size", "busbw (GB/s)", draw,
                           footnote)


def latency_figure(frame: pd.DataFrame, footnote: str = ""):
    """Median time against size, log-log, shaded up to p95: flat while latency-bound."""
    def draw(ax, curve, style, *_):
        ax.plot(curve.index, curve["time_us_median"], **style)
        if "time_us_p95" in curve.columns:
            ax.fill_between(curve.index, curve["time_us_median"], curve["time_us_p95"],
                            color=style["color"], alpha=0.15, linewidth=0)
    return _per_world_size(frame, "AllReduce time against size (line: median, band: to p95)",
                           "time per AllReduce (us)", draw, footnote, logy=True)


def speedup_figure(frame: pd.DataFrame, footnote: str = ""):
    """Each algorithm's time over native's at the same size, world size and series."""
    if "native" not in set(frame["algorithm"]):
        return None

    def draw(ax, curve, style, algorithm, series, at):
        if algorithm == "native" or (series, "native") not in at.index.droplevel("size_bytes"):
            return
        native = at.loc[(series, "native"), "time_us_median"]
        ratio = (curve["time_us_median"] / native).dropna()
        ax.plot(ratio.index, ratio.values, **style)
    return _per_world_size(frame, "Time relative to native (< 1: faster than the backend's own)",
                           "time / time(native)", draw, footnote, logy=True, reference=1.0)


def scaling_figure(frame: pd.DataFrame, footnote: str = "", size_bytes: int | None = None):
    """busbw(N) / busbw(N_min) at one size (ideal 1), and time(N) / time(N_min) beside naive's theory."""
    size_bytes = chosen_size(frame, size_bytes)
    if size_bytes is None:  # no AllReduce rows
        return None
    scaling = scaling_efficiency(frame, size_bytes)
    world_sizes = sorted(scaling.index.get_level_values("world_size").unique())
    if len(world_sizes) < 2:  # one point per line: the report says what would show scaling
        return None
    styles = Styles(frame)
    fig, (left, right) = panels(2, f"Scaling with world size at {format_size(size_bytes)} per rank")
    for series, algorithm in styles.order(scaling):
        rows = scaling.loc[(series, algorithm)]
        left.plot(rows.index, rows["efficiency"], **styles(algorithm, series))
        right.plot(rows.index, rows["time_ratio"], **styles(algorithm, series))
    smallest = world_sizes[0]
    left.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal (flat busbw)")
    right.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="flat time (ideal ring)")
    if "naive" in scaling.index.get_level_values("algorithm") and len(world_sizes) > 1:
        right.plot(world_sizes, [(n - 1) / (smallest - 1) for n in world_sizes], color="grey",
                   linestyle=":", linewidth=1, label="naive theory (N-1)/(N_min-1)")
    left.set_ylabel("scaling efficiency busbw(N) / busbw(N_min)")
    right.set_ylabel("time(N) / time(N_min)")
    left.set_title("busbw efficiency (1 = ideal)", fontsize=10)
    right.set_title("time growth", fontsize=10)
    for ax in (left, right):
        world_size_axis(ax, world_sizes)
        ax.grid(True, alpha=0.3)
        legend(ax, fontsize=7)
    left.set_ylim(bottom=0)
    return finish_figure(fig, footnote)


def figures(frame: pd.DataFrame, size_bytes: int | None = None, note: str | None = None) -> dict:
    note = footnote(frame) if note is None else note
    made = {
        "bandwidth": bandwidth_figure(frame, note),
        "latency": latency_figure(frame, note),
        "scaling": scaling_figure(frame, note, size_bytes),
        "speedup": speedup_figure(frame, note),
    }
    return {name: fig for name, fig in made.items() if fig is not None}


def ranks_figure(samples: pd.DataFrame, frame: pd.DataFrame, footnote: str = ""):
    """Every rank's time per call at the largest size of each world size (median, p5-p95 bar)."""
    from allreduce_bench.core.analysis.ranks import per_rank_times

    times = per_rank_times(samples) if len(samples) else pd.DataFrame()
    if times.empty:
        return None
    styles = Styles(frame)
    world_sizes = sorted(times.index.get_level_values("world_size").unique())
    fig, axes = panels(len(world_sizes), "Per-rank time per call at the largest size")
    for ax, world_size in zip(axes, world_sizes):
        at = times.xs(world_size, level="world_size")
        size = at.index.get_level_values("size_bytes")[0]
        algorithms = sorted(at.index.get_level_values("algorithm").unique(), key=algorithm_rank)
        for i, algorithm in enumerate(algorithms):
            curve = at.xs((size, algorithm), level=("size_bytes", "algorithm"))
            # each algorithm a little aside and with its own marker: equal times do not hide one
            shift = 0.25 * (i - (len(algorithms) - 1) / 2) / max(len(algorithms) - 1, 1)
            ax.errorbar(curve.index + shift, curve["median_us"],
                        yerr=[curve["median_us"] - curve["p5_us"], curve["p95_us"] - curve["median_us"]],
                        color=styles.colours.get(algorithm, "black"), marker=MARKERS[i % len(MARKERS)],
                        markersize=4, capsize=3, label=algorithm)
        ax.set_xticks(sorted(at.index.get_level_values("rank").unique()))
        ax.set_xlabel("rank")
        ax.set_ylabel("time per call (us), median and p5-p95")
        ax.set_title(f"N = {world_size} at {format_size(size)}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.ticklabel_format(axis="y", style="plain")  # microseconds, not "1e6" above the axis
        legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not over, the lines
    # A rank that calls late finds the others already waiting: it measures the least time, they
    # their wait. Said in the footnote (wrapped to the figure): no axis label holds it readably.
    return finish_figure(fig, "Lowest point: the rank that called last; the others' times include "
                         "waiting for it." + (f"\n{footnote}" if footnote else ""))


def draw_all(frame: pd.DataFrame, out_dir: Path, fmt: str = "png",
             size_bytes: int | None = None, sections=()) -> dict[str, Path]:
    """Save every figure that applies, the `sections`' too, as out_dir/<name>.<fmt>; name -> path."""
    with quiet_layout():
        return _draw_all(frame, Path(out_dir), fmt, size_bytes, sections)


def _draw_all(frame: pd.DataFrame, out_dir: Path, fmt: str, size_bytes: int | None, sections) -> dict[str, Path]:
    size_bytes = chosen_size(frame, None, sections) if size_bytes is None else size_bytes
    drawn: dict[str, Path] = {name: save(fig, out_dir / f"{name}.{fmt}")
             for name, fig in (figures(frame, size_bytes).items() if size_bytes is not None else [])}
    if size_bytes is not None and "source" in frame.columns:  # raw samples kept (schema 2)
        from allreduce_bench.core.results.load import load_samples
        samples = load_samples(sorted(set(frame["source"].dropna())))
        if "run_id" in frame.columns and len(samples):
            samples = samples[samples["run_id"].isin(set(frame["run_id"]))]
        fig = ranks_figure(samples, frame, footnote(frame))
        if fig is not None:
            drawn["ranks"] = save(fig, out_dir / f"ranks.{fmt}")
    drawn.update(collective_plots.draw(frame, out_dir, fmt))  # the other collectives, if any
    for section in sections:
        if section.draw is not None:
            drawn.update(section.draw(frame, out_dir, fmt, footnote(frame)))
    return drawn
