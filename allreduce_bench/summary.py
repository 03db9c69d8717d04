"""Summary numbers computed from a results DataFrame alone (no process groups)."""
from __future__ import annotations

import pandas as pd


def allreduce_rows(frame: pd.DataFrame) -> pd.DataFrame:
    if "benchmark" in frame.columns:
        frame = frame[frame["benchmark"].fillna("allreduce") == "allreduce"]
    return frame


def peak_busbw(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak busbw (GB/s) per algorithm (rows) and world size (columns)."""
    frame = allreduce_rows(frame)
    return frame.pivot_table(index="algorithm", columns="world_size", values="busbw_GBps",
                             aggfunc="max")


def ratio_at_largest(frame: pd.DataFrame, numerator: str, denominator: str) -> pd.Series:
    """time(denominator) / time(numerator) = busbw(numerator)/busbw(denominator) at the largest
    size measured by both, per world size. > 1 means `numerator` is faster."""
    times = allreduce_rows(frame).groupby(["world_size", "algorithm", "size_bytes"])[
        "time_us_median"].median()
    out = {}
    for world_size, rows in times.groupby(level="world_size"):
        rows = rows.droplevel("world_size")
        if numerator in rows.index and denominator in rows.index:
            common = rows[numerator].index.intersection(rows[denominator].index)
            if len(common):
                size = common.max()
                out[world_size] = float(rows[denominator][size] / rows[numerator][size])
    return pd.Series(out, name=f"{numerator}/{denominator}", dtype="float64")


def summary_text(frame: pd.DataFrame) -> str:
    lines = ["Peak busbw (GB/s) per algorithm and world size:",
             peak_busbw(frame).round(3).to_string()]
    frame = allreduce_rows(frame)
    largest = frame["size_bytes"].max()
    for num, den in (("ring", "native"), ("hierarchical", "ring")):
        ratios = ratio_at_largest(frame, num, den)
        if not ratios.empty:
            parts = ", ".join(f"N={n}: {r:.2f}" for n, r in ratios.items())
            lines.append(f"{num} vs {den} at {int(largest)} B (busbw ratio, >1 = {num} faster): {parts}")
    wrong = int(frame["wrong"].sum()) if "wrong" in frame.columns else 0
    lines.append(f"#wrong in total: {wrong}")
    return "\n".join(lines)
