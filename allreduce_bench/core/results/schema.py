"""What results files hold: the columns of results.csv and of the raw samples, the schema
version written into meta.json, and which rows are AllReduce measurements."""
from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

# meta.json's schema_version; doc/results.md says what each version changed
SCHEMA_VERSION = 5
SCHEMA_2_NAMES = {"slowest_rank": "late_rank", "slowest_rank_share": "late_rank_share",
                  "rank_lag_us": "late_rank_lag_us"}

# what each column means: doc/results.md
COLUMNS = [
    "run_id", "timestamp", "tag", "benchmark", "collective", "algorithm", "backend", "device", "dtype",
    "world_size", "nodes", "ranks_per_node", "size_bytes", "count",
    "timing", "samples", "loops", "warmup",
    "time_us_median", "time_us_mean", "time_us_p5", "time_us_p95", "time_us_p99", "time_us_min",
    "time_us_max", "time_cv", "unstable", "rounds", "round_spread", "round_p",
    "time_us_ci_low", "time_us_ci_high", "fast_us_median", "fast_share", "slow_us_median", "slow_share",
    "time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us", "skew_share",
    "algbw_GBps", "busbw_GBps", "wrong",
    # ddp rows (ddp/measurements.py)
    "measure", "bucket_mb", "accum", "bucket_sizes", "allreduce_calls", "allreduce_bytes",
    # emulate, links; the collective a backend ran in this one's place; health rows
    "emulation", "link", "operation", "runs_as", "health_check", "health_round", "hosts", "rail",
]
# Text that can look like a number: a run_id (uuid4 hex[:12]) reads as one 0.7% of the time
# ("1234e5678901" is a float, "123456789012" an int), and a --tag may be "2024". Read as text.
TEXT_DTYPES = {"run_id": str, "tag": str}
REQUIRED = ["algorithm", "world_size", "size_bytes", "time_us_median", "busbw_GBps"]
RESULTS_FILE, META_FILE, SAMPLES_DIR = "results.csv", "meta.json", "samples.parquet"
# samples.parquet/: one row per (measurement, sample, rank), a part per measurement
SAMPLE_COLUMNS = ["run_id", "benchmark", "algorithm", "world_size", "size_bytes", "link",
                  "operation", "measure", "bucket_mb", "sample", "rank", "host", "loops", "time_us",
                  "round"]


def read_results_csv(path) -> pd.DataFrame:
    """A results.csv (or any CSV with a run_id) as pandas reads it, its ids kept as text."""
    return pd.read_csv(path, dtype=TEXT_DTYPES)


def allreduce_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The `run` rows (benchmark = allreduce; files from before that column count as such)."""
    if "benchmark" in frame.columns:
        frame = frame[frame["benchmark"].fillna("allreduce") == "allreduce"]
    return frame


def samples_frame(row: dict, per_rank_us, ranks, hosts=None, round_index: int = 0,
                  first_sample: int = 0) -> pd.DataFrame:
    """One measurement's samples, a row per (sample, rank): `ranks` the group's global ranks in
    group order, `hosts` every global rank's host; a later round numbers on from `first_sample`."""
    # whole columns at once: a record per (rank, sample) took ~3 s a row at 4,096 ranks x 200
    counts = [len(times) for times in per_rank_us]
    of_rank = [int(ranks[index]) for index in range(len(counts))]
    names = [hosts[rank] if hosts and rank < len(hosts) else "" for rank in of_rank]
    frame = pd.DataFrame({
        "sample": np.concatenate([np.arange(first_sample, first_sample + c, dtype=np.int64) for c in counts])
        if counts else np.zeros(0, dtype=np.int64),
        "rank": np.repeat(np.array(of_rank, dtype=np.int64), counts),
        "host": pd.Series(np.repeat(np.array(names, dtype=object), counts), dtype="str"),
        "time_us": np.fromiter(chain.from_iterable(per_rank_us), dtype=float, count=sum(counts))})
    for column in ("run_id", "benchmark", "algorithm", "world_size", "size_bytes", "link",
                   "operation", "measure", "bucket_mb", "loops"):
        value = row.get(column)
        frame[column] = "" if value is None and column in ("link", "operation", "measure") else value
    frame["bucket_mb"] = frame["bucket_mb"].astype("float64")
    frame["round"] = round_index
    return frame[SAMPLE_COLUMNS]


# Rows imported from other tools (allreduce-bench import; doc/interop.md)
IMPORTED_COLUMNS = ["source_tool", "in_place", "time_printed", "algbw_printed",
                    "busbw_printed", "wrong_printed", "max_error", "time_cv_pct",
                    "source_file", "source_line", "ranks"]
# How close to the link's peak: the peak of the link class bounding the world (measure/link_peaks.py)
PEAK_COLUMNS = ["link_peak_GBps", "busbw_pct_of_peak"]
PARQUET_FILE = "results.parquet"
