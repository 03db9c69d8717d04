"""Which rank holds the others up: a rank that starts late measures the shortest interval while
the others wait for it (metrics.sample_stats names it per row)."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.analysis.tables import label_runs, run_metas
from allreduce_bench.core.results.schema import allreduce_rows


def _sampled(frame: pd.DataFrame) -> pd.DataFrame:
    """AllReduce rows measured with samples on >= 2 ranks (older rows have no per-rank data)."""
    rows = allreduce_rows(frame)
    if "late_rank" not in rows.columns:
        return rows.iloc[0:0]
    rows = rows[rows["late_rank"].notna() & (rows["world_size"] >= 2)]
    return label_runs(rows)


def stands_out(rows_named: int, rows: int, share: float, world_size: int) -> bool:
    """Named in most rows, and late clearly more often than chance (1/N of the samples) in them."""
    return rows_named > rows / 2 and share >= min(0.9, 1.5 / world_size)


def rank_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (series, world_size): the rank most often last to start, its host, rows, share and lag."""
    rows = _sampled(frame)
    if rows.empty:
        return pd.DataFrame()
    metas = run_metas(frame)
    found = []
    for (series, world_size), group in rows.groupby(["series", "world_size"]):
        counts = group["late_rank"].astype(int).value_counts()
        rank = int(counts.index[0])
        named = group[group["late_rank"].astype(int) == rank]
        run = named["run"].iloc[0]
        hosts = metas.get(run, {}).get("hostnames", [])
        share = float(named["late_rank_share"].median())
        lag = float(named["late_rank_lag_us"].median()) if "late_rank_lag_us" in named else float("nan")
        found.append({"series": series, "world_size": int(world_size), "rank": rank,
                      "host": hosts[rank] if rank < len(hosts) else "",
                      "rows_named": int(counts.iloc[0]), "rows": len(group),
                      "share_of_samples": share, "lag_us": lag,
                      "stands_out": stands_out(int(counts.iloc[0]), len(group), share,
                                               int(world_size))})
    return pd.DataFrame(found).set_index(["series", "world_size"])


def per_rank_times(samples: pd.DataFrame, size_bytes: int | None = None) -> pd.DataFrame:
    """Median, p5 and p95 of every rank's time per call at one size (default: each world's largest)."""
    rows = samples[samples["benchmark"].fillna("allreduce") == "allreduce"]
    if rows.empty:
        return pd.DataFrame()
    if size_bytes is None:
        largest = rows.groupby("world_size")["size_bytes"].transform("max")
        rows = rows[rows["size_bytes"] == largest]
    else:
        rows = rows[rows["size_bytes"] == size_bytes]
    grouped = rows.groupby(["world_size", "size_bytes", "algorithm", "rank"])["time_us"]
    return pd.DataFrame({"median_us": grouped.median(), "p5_us": grouped.quantile(0.05),
                         "p95_us": grouped.quantile(0.95)})

