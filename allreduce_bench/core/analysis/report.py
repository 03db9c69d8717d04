"""report.md and the terminal's tables: the numbers of `tables`, written out, with the figures."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.advice import facts_by_run, machine_lines
from allreduce_bench.core.analysis.collective_tables import collective_rows, markdown_parts, terminal_text
from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.analysis.noise import TWO_STATES, UNSTABLE, two_state_table, unstable_table
from allreduce_bench.core.analysis.placement import placement_lines, placement_warnings
from allreduce_bench.core.analysis.ranks import rank_table
from allreduce_bench.core.analysis.tables import (  # noqa: F401  (re-exported for callers)
    algorithm_rank,
    chosen_size,
    describe_run,
    footnote,
    half_peak_size,
    label_runs,
    naive_penalty,
    peak_busbw,
    ratio_at_largest,
    run_metas,
    scaling_efficiency,
)
from allreduce_bench.core.analysis.terminal import terminal_table, wrapped
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.units import format_size


def terminal_summary(frame: pd.DataFrame) -> str:
    """What `run` prints at the end."""
    others = collective_rows(frame, in_place=True)  # --in-place's halves are checked too
    lines = allreduce_summary(frame) if len(allreduce_rows(frame)) else []
    lines += [terminal_text(frame)] if len(others) else []
    wrong = int(allreduce_rows(frame)["wrong"].sum() + others["wrong"].sum()) if "wrong" in frame.columns else 0
    lines.append(f"#wrong in total: {wrong}")
    return "\n".join(lines)


def allreduce_summary(frame: pd.DataFrame) -> list[str]:
    peaks = peak_busbw(frame)["peak_busbw_GBps"]
    if peaks.index.get_level_values("series").nunique() == 1:
        peaks = peaks.droplevel("series")
    table = peaks.unstack("world_size").sort_index(  # algorithms in the registry's order
        key=lambda level: level.map(algorithm_rank) if level.name == "algorithm" else level)
    lines = [one_rank_line(frame)] if 1 in table.columns else []  # busbw 0 by definition: no peak
    table = table.drop(columns=1, errors="ignore").dropna(how="all")
    if len(table.columns):
        lines[:0] = ["Peak busbw (GB/s) per algorithm and world size:", table.round(3).to_string()]
    for numerator, denominator in (("ring", "native"), ("hierarchical", "ring")):
        ratios = ratio_at_largest(frame, numerator, denominator)
        if not ratios.empty:
            named = ratios.index.get_level_values("series").nunique() > 1
            parts = ", ".join(f"{f'{series} ' if named else ''}N={world_size} at "
                              f"{format_size(row.size_bytes)}: {row.busbw_ratio:.2f}"
                              for (series, world_size), row in ratios.iterrows())
            lines.append(f"{numerator} vs {denominator} (busbw ratio at the largest size both "
                         f"measured, > 1: {numerator} faster): {parts}")
    metas = run_metas(frame)
    if len(metas) == 1:  # one run's machine (a merged report's rows come from several)
        lines += machine_lines(frame, next(iter(metas.values())))
    lines += placement_warnings(metas)
    return lines


def one_rank_line(frame: pd.DataFrame) -> str:
    rows = allreduce_rows(frame)
    rows = rows[rows["world_size"] == 1].groupby("algorithm")["time_us_median"]
    calls = ", ".join(f"{name} {low:.3g}-{high:.3g} us" for name, (low, high) in
                      rows.agg(["min", "max"]).sort_index(key=lambda i: i.map(algorithm_rank)).iterrows())
    return ("World size 1 (not in the peaks: busbw is 0 by definition, one rank moves nothing) measures the "
            f"backend's own call with no peer, per call over the sizes: {calls}")


def _gbps(x: float) -> str:
    return f"{x:.3g}"


def _ratio(x: float) -> str:
    return f"{x:.2f}"


def readable(table: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """Index levels as columns, `series` dropped where there is only one, columns renamed."""
    table = table.reset_index()
    if "algorithm" in table.columns:  # native, ring, naive, hierarchical, then by name
        keys = [c for c in ("series", "run", "algorithm", "world_size") if c in table.columns]
        table = table.sort_values(keys, key=lambda c: c.map(algorithm_rank) if c.name ==
                                  "algorithm" else c, kind="stable", ignore_index=True)
    for column in ("series", "run"):
        if column in table.columns and table[column].nunique() <= 1:
            table = table.drop(columns=column)
    return table.rename(columns=names)


Table = tuple[str, str, "pd.DataFrame | None"]  # (title, how to read it, table of strings or none)
WORLD = {"world_size": "world size"}


def _peak_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    peaks = peak_busbw(frame).join(half_peak_size(frame))
    return [(
        "Peak bus bandwidth",
        "Highest busbw over the sizes measured, the size reaching it, and the half-peak size: the "
        "smallest size whose busbw reaches half the peak (below it, latency dominates).",
        readable(pd.DataFrame({
            "peak busbw (GB/s)": peaks["peak_busbw_GBps"].map(_gbps),
            "at size": peaks["peak_size_bytes"].map(format_size),
            "half-peak size": peaks["half_peak_size_bytes"].map(
                lambda size: format_size(size) if pd.notna(size) else "-")}), WORLD))]


def _comparison_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    present = set(allreduce_rows(frame)["algorithm"].astype(str))
    pairs = [("ring", "native")] + [(a, "ring") for a in sorted(present, key=algorithm_rank)
                                    if a not in ("ring", "native", "naive")]
    compared = [ratio_at_largest(frame, a, b)["busbw_ratio"].rename(f"{a}/{b}") for a, b in pairs]
    sizes = [ratio_at_largest(frame, a, b)["size_bytes"] for a, b in pairs]
    if not any(len(c) for c in compared):
        return []
    table = pd.concat([c.map(_ratio) for c in compared], axis=1).fillna("-")
    table.insert(0, "size", pd.concat(sizes).groupby(level=[0, 1]).max().map(format_size))
    return [(
        "Algorithm comparison at the largest size",
        "busbw ratio at the largest size both algorithms measured (= inverse time ratio); "
        "> 1 means the first algorithm is faster; every algorithm against the ring, the ring "
        "against the backend's own.", readable(table, WORLD))]


def _naive_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    penalty = naive_penalty(frame)
    if not len(penalty):
        return []
    return [(
        "Naive baseline: rank-0 penalty",
        "time_naive(N) / time_naive(N_ref) at the largest size measured at both, N_ref the "
        "smallest world size (2); theory: rank 0 moves (N-1) x the data, so (N-1)/(N_ref-1).",
        readable(pd.DataFrame({
            "N_ref": penalty["reference_world_size"],
            "size": penalty["size_bytes"].map(format_size),
            "measured": penalty["time_ratio"].map(_ratio),
            "theory (N-1)/(N_ref-1)": penalty["predicted_ratio"].map(_ratio)}),
            {"world_size": "N"}))]


def _scaling_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    scaling = scaling_efficiency(frame, size_bytes)
    if not len(scaling):
        return []
    world_sizes = sorted(set(scaling.index.get_level_values("world_size")))
    if len(world_sizes) < 2:  # every efficiency 1.00 by definition: say what would show scaling
        return [("Scaling", f"Only world size {world_sizes[0]} was measured: scaling compares "
                 "busbw and time across world sizes, so it needs two or more (e.g. `run "
                 "--world-sizes 2,4`; its table and figure then appear here).", None)]
    return [(
        f"Scaling efficiency at {format_size(size_bytes)}",
        "efficiency = busbw(N) / busbw(N_min): 1 is ideal (the ring's flat line); "
        "time ratio = time(N) / time(N_min).",
        readable(pd.DataFrame({
            "busbw (GB/s)": scaling["busbw_GBps"].map(_gbps),
            "efficiency": scaling["efficiency"].map(_ratio),
            "time ratio": scaling["time_ratio"].map(_ratio)}), WORLD))]


def _late_rank_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    late = rank_table(frame)
    if not len(late):
        return []
    return [(
        "Ranks: who starts last",
        "Per world size, the rank most often last to start a sample (a late rank measures the "
        "shortest interval: the others wait for it inside the collective), in how many rows it "
        "was named, its median share of samples and how late it started (per sample). "
        "'stands out' = named in most rows and late in >= 1.5/N of the samples.",
        readable(pd.DataFrame({
            "rank": late["rank"], "host": late["host"],
            "rows": [f"{a}/{b}" for a, b in zip(late["rows_named"], late["rows"])],
            "share of samples": late["share_of_samples"].map(_ratio),
            "late by (us)": late["lag_us"].map(lambda x: f"{x:.0f}"),
            "stands out": late["stands_out"].map({True: "yes", False: "no"})}), WORLD))]


def _unstable_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    table = unstable_table(frame)
    if table.empty:
        return []
    return [("Unstable measurements", UNSTABLE + " The summary says what would help on this machine.",
             readable(table, WORLD))]


def _two_state_table(frame: pd.DataFrame, size_bytes: int) -> list[Table]:
    table = two_state_table(frame)
    return [] if table.empty else [("Two states", TWO_STATES, readable(table, WORLD))]


# The report's tables in order; each builder returns its table, or none when the rows lack it.
# The features' tables come after them, in the order of the sections that lend them.
TABLES = (_peak_table, _comparison_table, _naive_table, _scaling_table, _late_rank_table,
          _unstable_table, _two_state_table)


def report_tables(frame: pd.DataFrame, size_bytes: int, sections=()) -> list[Table]:
    """The sweep's tables for the terminal and report.md, then those the `sections` lend (core/hooks.py)."""
    lent = tuple(section.tables for section in sections if section.tables is not None)
    return [table for build in TABLES + lent
            for table in build(frame, size_bytes)]


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    wrong = (label_runs(frame).groupby("run")["wrong"].sum() if "wrong" in frame.columns
             else pd.Series(dtype="int64"))
    table = pd.DataFrame([{"run": run or "-", "run id": meta.get("run_id", "?"),
                           "tag": meta.get("tag") or "-", "on": describe_run(meta),
                           "placement": "; ".join(placement_lines(meta)) or "-",
                           "#wrong": int(wrong.get(run, 0))} for run, meta in run_metas(frame).items()])
    return table.drop(columns="run") if (table["run"] == "-").all() else table


@dataclass(frozen=True)
class Report:
    """The report's markdown, built once: report.md and report.html render the same parts."""

    head: list[str]
    body: list[str]
    figures: list[str]

    def markdown(self) -> str:
        return "\n".join(self.head + self.body + self.figures)


def report_markdown(frame: pd.DataFrame, size_bytes: int | None, figures: dict[str, Path],
                    out_dir: Path, sections=()) -> Report:
    """The sweep's report, then the `sections` (core/hooks.py), then every figure none embedded."""
    head = ["# AllReduce benchmark report", "",
            "busbw = size / time x 2(N-1)/N in decimal GB/s, as nccl-tests defines it; times are "
            "the median over samples of the slowest rank's time per call (a sample times `loops` "
            "back-to-back calls; see doc/methodology.md).", ""]
    body = ["## Runs", "", markdown_table(runs_table(frame)), ""]
    for run, lines in facts_by_run(frame):  # the machine each run measured, and what would help
        body += ([f"**{run}**", ""] if run else []) + [f"- {line}" for line in lines] + [""]
    for title, note, table in report_tables(frame, size_bytes, sections) if size_bytes is not None else []:
        body += [f"## {title}", "", note, ""] + ([markdown_table(table), ""] if table is not None else [])
    body += markdown_parts(frame, markdown_table)
    for section in sections:
        body += section.markdown(frame, out_dir, figures)
    listed = [f"![{name}]({Path(path).resolve().relative_to(Path(out_dir).resolve()).as_posix()})"
              for name, path in figures.items() if not any(section.own_figures(name) for section in sections)]
    return Report(head, body, ["## Figures", ""] + [line for image in listed for line in (image, "")]
                  if listed else [])


def print_tables(frame: pd.DataFrame, size_bytes: int, echo=print, sections=()) -> None:
    echo("Runs:\n" + terminal_table(runs_table(frame)))
    for title, note, table in report_tables(frame, size_bytes, sections) if size_bytes is not None else []:
        echo(f"\n{title}\n{wrapped(note, '  ')}" + (f"\n{terminal_table(table)}" if table is not None else ""))


HTML_FILE = "report.html"


def write_report(frame: pd.DataFrame, out_dir: Path, size: str | int | None = None,
                 fmt: str = "png", sections=()) -> tuple[dict[str, Path], Path]:
    """Every figure, report.md and report.html (one self-contained page) into out_dir."""
    from allreduce_bench.core.analysis.html import report_html
    from allreduce_bench.core.analysis.plots import draw_all  # matplotlib only when drawing

    size_bytes = chosen_size(frame, size, sections)
    out_dir = Path(out_dir)
    figures = draw_all(frame, out_dir, fmt=fmt, size_bytes=size_bytes, sections=sections)
    report = report_markdown(frame, size_bytes, figures, out_dir, sections)
    path = out_dir / "report.md"
    path.write_text(report.markdown())
    (out_dir / HTML_FILE).write_text(report_html(report, frame, figures), encoding="utf-8")
    return figures, path
