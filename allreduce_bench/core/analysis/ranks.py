"""Which rank holds the others up: the slow-rank section of the report, from rows and samples.

The method (metrics.sample_stats): a collective ends at about the same moment on every rank,
so a rank that *starts* a sample late measures the shortest interval while the others, waiting
for it inside the collective, measure a longer one. Per sample the late rank is the one with
the MINIMUM time; each row names the rank most often late (`late_rank`), the share of
samples it was late in, and by how much it lagged (`late_rank_lag_us`, per sample). Naming the rank
with the maximum time instead would name one of the ranks that waited.

What this cannot see: a rank slow *inside* the collective (a slower link or reduction on its
part of a ring) delays every rank alike, and is not told apart by times alone.
"""
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
    """One rank is the straggler when it is named in most rows and late clearly more often than
    chance (1/N of the samples) in them."""
    return rows_named > rows / 2 and share >= min(0.9, 1.5 / world_size)


def rank_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (series, world_size): the rank most often last to start, its host, in how many rows,
    its median share of samples and median lag, and whether it stands out."""
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
    """Median, p5 and p95 of every rank's time per call at one size (default: the largest of
    each world size), per (algorithm, world_size, rank)."""
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

