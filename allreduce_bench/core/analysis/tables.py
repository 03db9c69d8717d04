"""The numbers of a report, as plain functions of results rows, per *series*: one run's rows
(and link), so merged runs never mix in one number."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import COLLECTIVES
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.results.store import read_meta
from allreduce_bench.core.units import format_size, parse_size

CURVE = ["series", "algorithm", "world_size"]


def text_column(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as strings, '' where missing (an all-empty CSV column reads as float NaN)."""
    if column not in frame.columns:
        return pd.Series("", index=frame.index, dtype="object")
    values = frame[column].astype("object")
    return values.where(values.notna(), "").astype(str)


def algorithm_rank(name: str) -> str:
    """Sort key: the registry's order (built-ins, then plug-ins), then any other name."""
    from allreduce_bench.core.algorithms import order

    known = order()
    return f"{known.index(name) if name in known else len(known):03d}{name}"


def label_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with `run` (tag, plus run id where tags repeat) and `series` (run plus link)."""
    frame = frame.copy()
    tag = text_column(frame, "tag")
    if "run_id" in frame.columns:
        run_id = text_column(frame, "run_id").str[:8]
    else:  # rows without run ids: the run directory names them
        run_id = text_column(frame, "source").map(lambda source: Path(source).name)
    repeated = tag.map(run_id.groupby(tag).nunique()) > 1
    with_id = pd.Series([f"{t} ({r})" if t else r for t, r in zip(tag, run_id)],
                        index=frame.index, dtype="object")
    frame["run"] = tag.where(~repeated, with_id)
    for column in ("dtype", "backend", "device"):  # runs that differ in these say so
        values = text_column(frame, column)
        if values[values != ""].nunique() > 1:
            frame["run"] = (frame["run"] + " " + values).str.strip()
    frame["series"] = (frame["run"] + " " + text_column(frame, "link")).str.strip()
    return frame


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """One point per (series, algorithm, world_size, size_bytes): the median of repeated rows."""
    frame = label_runs(allreduce_rows(frame)).dropna(subset=["time_us_median", "busbw_GBps"])
    columns = [c for c in ("time_us_median", "time_us_p95", "busbw_GBps") if c in frame.columns]
    return frame.groupby(CURVE + ["size_bytes"])[columns].median().sort_index()


def chosen_size(frame: pd.DataFrame, size: str | int | None = None, sections=()) -> int | None:
    """The size scaling is compared at: `size` if measured, else the largest; None without
    AllReduce rows but with other collectives' or the `sections`' benchmarks' rows."""
    measured = sorted(int(s) for s in allreduce_rows(frame)["size_bytes"].dropna().unique())
    reported = [b for section in sections for b in section.benchmarks]
    others = "benchmark" in frame.columns and bool(
        frame["benchmark"].isin([*COLLECTIVES, *reported]).any())
    if not measured and size is None and others:
        return None
    if not measured:
        raise UsageError("the results have no rows of a collective"
                         + "".join(f" or of {b.upper()}" for b in reported) + "; run a benchmark first")
    if size is None:
        return measured[-1]
    wanted = parse_size(size, "--size")
    if wanted not in measured:
        raise UsageError(f"size {format_size(wanted)} was not measured; choose --size from "
                         + ", ".join(format_size(s) for s in measured))
    return wanted


def peak_busbw(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak busbw (GB/s) and the size reaching it, per (series, algorithm, world_size)."""
    points = curves(frame)["busbw_GBps"]
    top = points.loc[points.groupby(level=CURVE).idxmax().values]
    return pd.DataFrame({"peak_busbw_GBps": top.values,
                         "peak_size_bytes": top.index.get_level_values("size_bytes")},
                        index=top.index.droplevel("size_bytes"))


def half_peak_size(frame: pd.DataFrame) -> pd.Series:
    """The smallest size whose busbw reaches half the peak, per curve: below it, latency dominates."""
    points = curves(frame)["busbw_GBps"]
    peak = points.groupby(level=CURVE).transform("max")
    reached = points[(points >= peak / 2) & (peak > 0)]  # busbw is 0 by definition at N = 1
    sizes = pd.Series(reached.index.get_level_values("size_bytes"), index=reached.index)
    return sizes.groupby(level=CURVE).min().rename("half_peak_size_bytes")


def ratio_at_largest(frame: pd.DataFrame, numerator: str, denominator: str) -> pd.DataFrame:
    """busbw(numerator) / busbw(denominator) at the largest size both measured, per (series,
    world_size): > 1 means `numerator` is faster."""
    points = curves(frame)["busbw_GBps"]
    rows = []
    for (series, world_size), curve in points.groupby(level=["series", "world_size"]):
        curve = curve.droplevel(["series", "world_size"])
        algorithms = curve.index.get_level_values("algorithm")
        if world_size < 2 or numerator not in algorithms or denominator not in algorithms:
            continue
        common = curve[numerator].index.intersection(curve[denominator].index)
        if len(common):
            size = common.max()
            rows.append((series, world_size, int(size),
                         curve[numerator][size] / curve[denominator][size]))
    return pd.DataFrame(rows, columns=["series", "world_size", "size_bytes", "busbw_ratio"]
                        ).set_index(["series", "world_size"])


def naive_penalty(frame: pd.DataFrame) -> pd.DataFrame:
    """The naive baseline's time(N) / time(N_ref) against (N-1) / (N_ref-1), what its rank-0
    bottleneck predicts (rank 0 moves (N-1) x S bytes)."""
    times = curves(frame)["time_us_median"]
    rows = []
    if "naive" in times.index.get_level_values("algorithm"):
        naive = times.xs("naive", level="algorithm")
        for series, curve in naive.groupby(level="series"):
            curve = curve.droplevel("series")
            world_sizes = sorted(n for n in curve.index.get_level_values("world_size").unique()
                                 if n >= 2)
            for n in world_sizes[1:]:
                reference = world_sizes[0]
                common = curve[n].index.intersection(curve[reference].index)
                if len(common):
                    size = common.max()
                    rows.append((series, n, reference, int(size),
                                 curve[n][size] / curve[reference][size],
                                 (n - 1) / (reference - 1)))
    return pd.DataFrame(rows, columns=["series", "world_size", "reference_world_size",
                                       "size_bytes", "time_ratio", "predicted_ratio"]
                        ).set_index(["series", "world_size"])


def scaling_efficiency(frame: pd.DataFrame, size_bytes: int) -> pd.DataFrame:
    """At one size, per curve: busbw(N) / busbw(N_min) (1 is ideal) and time(N) / time(N_min),
    N_min the smallest world size >= 2 (busbw is 0 by definition at N = 1)."""
    points = curves(frame)
    points = points[points.index.get_level_values("world_size") >= 2]
    at = points[points.index.get_level_values("size_bytes") == size_bytes].droplevel("size_bytes")
    first = at.groupby(level=["series", "algorithm"]).transform("first")  # sorted: N_min first
    world_sizes = pd.Series(at.index.get_level_values("world_size"), index=at.index)
    return pd.DataFrame({
        "reference_world_size": world_sizes.groupby(level=["series", "algorithm"]).transform("min"),
        "busbw_GBps": at["busbw_GBps"],
        "efficiency": at["busbw_GBps"] / first["busbw_GBps"],
        "time_ratio": at["time_us_median"] / first["time_us_median"],
    }, index=at.index)


# --- what runs the rows come from ------------------------------------------------------------

def run_metas(frame: pd.DataFrame) -> dict[str, dict]:
    """run label -> its meta.json, or what the rows themselves say."""
    frame = label_runs(frame)
    metas = {}
    for run, rows in frame.groupby("run", sort=True):
        first = rows.iloc[0]
        meta = read_meta(Path(first["source"])) if "source" in rows.columns else {}
        run_id = str(first["run_id"]) if "run_id" in rows.columns else None
        if run_id and meta.get("run_id") not in (None, run_id):  # an earlier run in that directory
            meta = next((m for m in meta.get("earlier_runs", []) if m.get("run_id") == run_id), {})
        meta = dict(meta)
        for key in ("backend", "device", "run_id", "tag"):
            if not meta.get(key) and key in rows.columns:
                meta[key] = str(first[key])
        if not meta.get("started") and "timestamp" in rows.columns:
            meta["started"] = str(rows["timestamp"].min())
        metas[run] = meta
    return metas


def describe_run(meta: dict) -> str:
    """'backend gloo, device Intel Xeon, hosts vm, 2026-11-29 10:13 UTC' for footnotes."""
    hosts = sorted({host for host in meta.get("hostnames", []) if host}) or ["?"]
    device = meta.get("device_name") or meta.get("device") or "?"
    started = str(meta.get("started", "?")).replace("T", " ").replace("+00:00", " UTC")
    return (f"backend {meta.get('backend', '?')}, device {device}, hosts {', '.join(hosts)}, "
            f"{started}")


def footnote(frame: pd.DataFrame) -> str:
    metas = run_metas(frame)
    return "\n".join(f"{run}: {describe_run(meta)}" if run else describe_run(meta)
                     for run, meta in metas.items())


# --- tables for people ----------------------------------------------------------------------
