"""A job's NCCL Inspector records as a run of benchmark=job: one row per (collective, size,
communicator size) with the benchmark's statistics over its calls (a call lasts as long as its
slowest rank), every rank's record a sample; `operation` keeps the collectives apart."""
from __future__ import annotations

import datetime as _dt

import numpy as np
import pandas as pd

from allreduce_bench.core.measure.binding import format_cpulist
from allreduce_bench.core.metrics import algbw_GBps, busbw_GBps, median_interval, two_states, untrusted
from allreduce_bench.core.results.schema import COLUMNS, IMPORTED_COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION
from allreduce_bench.interop import inspector

BENCHMARK = "job"
ROW_KEY = ["collective", "size_bytes", "n_ranks"]
CALL_KEY = ["comm", "collective", "sn", "n_ranks", "size_bytes"]


def calls(records: pd.DataFrame) -> pd.DataFrame:
    """One line per call: its time (its slowest rank's), its ranks, its number within its row."""
    found = records.groupby(CALL_KEY, sort=True).agg(time_us=("time_us", "max"), ranks=("rank", "nunique"))
    found = found.reset_index()
    found["sample"] = found.groupby(ROW_KEY).cumcount()
    return found


def ranks_text(ranks) -> str:
    """[0, 1, 2, 3, 6] -> '0-3,6'."""
    return format_cpulist(int(r) for r in ranks)


def _stats(times: list[float]) -> dict:
    series = pd.Series(times, dtype=float)
    mean = float(series.mean())
    cv = float(series.std(ddof=0) / mean) if mean > 0 else float("nan")
    interval = median_interval(times)  # the run's rules: metrics.sample_stats
    return {"time_us_median": float(series.median()), "time_us_mean": mean,
            "time_us_p5": float(series.quantile(0.05)), "time_us_p95": float(series.quantile(0.95)),
            "time_us_p99": float(series.quantile(0.99)), "time_us_min": float(series.min()),
            "time_us_max": float(series.max()), "time_cv": cv, "time_us_ci_low": interval[0],
            "time_us_ci_high": interval[1], "unstable": untrusted(float(series.median()), interval),
            **two_states(times)}


def rows(records: pd.DataFrame, run_id: str, tag: str, source: str) -> pd.DataFrame:
    timed = calls(records)
    started = pd.to_numeric(records["dumped_us"], errors="coerce").min()
    stamp = "" if pd.isna(started) else _dt.datetime.fromtimestamp(
        started / 1e6, _dt.timezone.utc).isoformat(timespec="seconds")
    found = []
    for (collective, size, n), group in records.groupby(ROW_KEY, sort=True):
        mine = timed[(timed["collective"] == collective) & (timed["size_bytes"] == size) & (timed["n_ranks"] == n)]
        stats = _stats(mine["time_us"].tolist())
        nodes = int(group["nnodes"].max()) if group["nnodes"].notna().any() else None
        found.append({"run_id": run_id, "timestamp": stamp, "tag": tag, "benchmark": BENCHMARK,
                      "collective": collective, "operation": collective, "algorithm": "native",
                      "backend": "nccl", "device": "cuda", "dtype": "", "world_size": int(n),
                      "nodes": nodes, "ranks_per_node": int(n) // nodes if nodes and n % nodes == 0 else None,
                      "size_bytes": int(size), "timing": inspector.TOOL, "samples": len(mine), "loops": 1,
                      **stats, "algbw_GBps": algbw_GBps(size, stats["time_us_median"]),
                      "busbw_GBps": busbw_GBps(size, stats["time_us_median"], int(n), collective),
                      "hosts": ",".join(sorted(set(group["host"]) - {""})), "ranks": ranks_text(group["rank"]),
                      "source_tool": inspector.TOOL, "source_file": source, "link": ""})
    frame = pd.DataFrame(found)
    for column in COLUMNS + IMPORTED_COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    return frame[COLUMNS + IMPORTED_COLUMNS]


def samples(records: pd.DataFrame, run_id: str) -> pd.DataFrame:
    numbered = records.merge(calls(records)[CALL_KEY + ["sample"]], on=CALL_KEY)
    frame = pd.DataFrame({"run_id": run_id, "benchmark": BENCHMARK, "algorithm": "native",
                          "world_size": numbered["n_ranks"].astype("int64"),
                          "size_bytes": numbered["size_bytes"].astype("int64"), "link": "",
                          "operation": numbered["collective"], "measure": "", "bucket_mb": np.nan,
                          "sample": numbered["sample"].astype("int64"), "rank": numbered["rank"].astype("int64"),
                          "host": numbered["host"], "loops": 1, "time_us": numbered["time_us"].astype(float),
                          "round": 0})
    return frame[SAMPLE_COLUMNS]


def communicators(records: pd.DataFrame) -> list[dict]:
    """Per communicator: its name, size, ranks and hosts read, and its calls per collective."""
    return [{"id": comm, "name": next((v for v in group["comm_name"] if v), ""), "n_ranks": int(n),
             "nnodes": int(group["nnodes"].max()) if group["nnodes"].notna().any() else None,
             "ranks": ranks_text(group["rank"]), "hosts": sorted(set(group["host"]) - {""}),
             "calls": {str(k): int(v) for k, v in calls(group).groupby("collective").size().items()}}
            for (comm, n), group in records.groupby(["comm", "n_ranks"], sort=True)]


def nccl_choices(records: pd.DataFrame) -> dict:
    """'all_reduce 64M N=8' -> {'RING/SIMPLE': calls}, where the records name them (v4.2+)."""
    named = records[(records["algo"] != "") | records["channels"].notna()]
    found = {}
    for (collective, size, n), group in named.groupby(ROW_KEY, sort=True):
        label = f"{collective} {size} B N={n}"
        ways = group.apply(lambda r: "/".join(p for p in (r["algo"], r["proto"]) if p)
                           + (f" {int(r['channels'])} channels" if pd.notna(r["channels"]) else ""), axis=1)
        found[label] = {str(k).strip(): int(v) for k, v in ways.value_counts().items()}
    return found


def meta(read: inspector.Records, run_id: str, tag: str, files: list[str]) -> dict:
    records = read.frame
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "tag": tag, "benchmark": BENCHMARK,
            "backend": "nccl", "device": "cuda",
            "imported": {"tool": inspector.TOOL, "files": files, "records": len(records),
                         "calls": len(calls(records)),
                         "versions": sorted({str(v) for v in records["version"].dropna()}),
                         "timing_sources": {str(k): int(v) for k, v in records["timing_source"].value_counts().items()},
                         "not_read": dict(read.other),
                         "skipped": [{"file": f, "line": line, "why": why} for f, line, why in read.skipped],
                         "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")},
            "hostnames": sorted(set(records["host"]) - {""}), "communicators": communicators(records),
            "nccl_choices": nccl_choices(records)}


def describe(read: inspector.Records, frame: pd.DataFrame, target) -> list[str]:
    records = read.frame
    sizes = sorted({int(n) for n in records["n_ranks"]})
    lines = [f"{len(read.files)} NCCL Inspector file(s): {len(records)} records of "
             f"{records[['comm', 'rank']].drop_duplicates().shape[0]} communicator rank(s) on "
             f"{len(set(records['host']) - {''}) or '?'} host(s), {records['comm'].nunique()} communicator(s) "
             f"of size {', '.join(map(str, sizes))} -> {len(calls(records))} calls in {len(frame)} rows "
             f"(collective, size, communicator size) -> {target}"]
    if read.other:
        lines.append("  not read: " + ", ".join(f"{v} {k}" for k, v in read.other.items()))
    if read.skipped:
        lines.append(f"  skipped {len(read.skipped)} line(s) (listed in meta.json):")
        lines += [f"    {f}:{line}: {why}" for f, line, why in read.skipped[:5]]
    return lines
