"""What results files hold: the columns of results.csv and of the raw samples, the schema
version written into meta.json, and which rows are AllReduce measurements."""
from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

# meta.json's schema_version. 1 (no field): one timed call per iteration, five statistics per
# row; 2: calibrated samples of `loops` back-to-back calls, raw per-rank samples kept; 3: the
# rank most often late is `late_rank` (schema 2 called it `slowest_rank`, though it names the
# rank that started last, not the slowest: results/load.py renames the old columns); 4:
# `skew_share` (how much of a sample was the barrier's exit skew), and loops calibrated so it is
# <= 1% where a sample of <= max_sample_s allows (older rows leave the column empty); 5: the
# median's confidence interval and the fast and slow states' medians and shares, `unstable`
# judged on the interval and the rounds (metrics.py) instead of the samples' spread.
SCHEMA_VERSION = 5
SCHEMA_2_NAMES = {"slowest_rank": "late_rank", "slowest_rank_share": "late_rank_share",
                  "rank_lag_us": "late_rank_lag_us"}

COLUMNS = [
    # benchmark = allreduce for AllReduce rows, the collective's name for the others (as `import`
    # writes nccl-tests' all_gather_perf rows); collective = the nccl-tests name of every row's
    "run_id", "timestamp", "tag", "benchmark", "collective", "algorithm", "backend", "device", "dtype",
    "world_size", "nodes", "ranks_per_node", "size_bytes", "count",
    # how it was timed: `timing` = samples (schema 2) or per-iteration (older runs); each of
    # `samples` samples times `loops` back-to-back calls; `warmup` untimed calls came first
    "timing", "samples", "loops", "warmup",
    # over samples of the slowest rank's time per call (metrics.sample_stats); p99 as nccl-tests
    # -I prints it (i_p99)
    "time_us_median", "time_us_mean", "time_us_p5", "time_us_p95", "time_us_p99", "time_us_min",
    "time_us_max",
    "time_cv", "unstable",
    # --rounds: how many interleaved passes the samples pooled, (max - min) / median of their
    # per-round medians, and where that exceeds 20% the Kruskal-Wallis p of the rounds' samples
    # (unstable also when rounds disagree: both; measure/rounds.py)
    "rounds", "round_spread", "round_p",
    # the median's confidence interval (unstable when it reaches beyond +-10% of the median);
    # where the samples fall into a fast and a slow state, each state's median and share
    "time_us_ci_low", "time_us_ci_high", "fast_us_median", "fast_share", "slow_us_median",
    "slow_share",
    # nccl-tests' figure for the same data; the rank most often last to start, its share, its lag;
    # the share of a sample that was the alignment's exit skew (median over samples)
    "time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us", "skew_share",
    "algbw_GBps", "busbw_GBps", "wrong",
    # benchmark = ddp rows (ddp/measurements.py): what was timed, DDP's bucket cap, micro-batches per
    # optimizer step, bucket sizes in ready order, and the AllReduce calls/bytes the hook counted
    "measure", "bucket_mb", "accum", "bucket_sizes", "allreduce_calls", "allreduce_bytes",
    # emulate: the emulated cluster ('2x2@350Mbit'); links: link = intra|inter, operation
    "emulation", "link", "operation",
    # the collective the backend really ran in its place, when not this one (gloo's
    # reduce_scatter_tensor runs an AllReduce: runs_as = all_reduce); empty otherwise
    "runs_as",
    # benchmark = health rows: which check (intra|rail|pair|bisect), round, hosts (a+b), rail
    "health_check", "health_round", "hosts", "rail",
]
# Text that can look like a number: a run_id (uuid4 hex[:12]) reads as one 0.7% of the time
# ("1234e5678901" is a float, "123456789012" an int), and a --tag may be "2024". Read as text.
TEXT_DTYPES = {"run_id": str, "tag": str}
REQUIRED = ["algorithm", "world_size", "size_bytes", "time_us_median", "busbw_GBps"]
RESULTS_FILE, META_FILE, SAMPLES_DIR = "results.csv", "meta.json", "samples.parquet"
# samples.parquet: one row per (measurement, sample, rank); a directory of parts, one per
# measurement, so it grows as rows do and a killed run keeps every finished part.
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
    """The raw samples of one measurement in the samples.parquet schema: one row per (sample,
    rank) with that rank's time per call. `ranks` are the global ranks of the measuring group
    in group-rank order; `hosts` the hostname of every global rank (when known). One round of
    a row measured in several (--rounds) numbers its samples on from `first_sample`."""
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


# Rows imported from other tools (allreduce-bench import): which tool and collective, out-of-place
# or in-place, the cells exactly as printed, the cv nccl-tests -I prints, where in the source
# file each row was read, and (a job's NCCL Inspector records) the ranks whose calls it pooled.
IMPORTED_COLUMNS = ["source_tool", "in_place", "time_printed", "algbw_printed",
                    "busbw_printed", "wrong_printed", "max_error", "time_cv_pct",
                    "source_file", "source_line", "ranks"]
# How close to the link's peak: the peak of the link class bounding the world (measure/link_peaks.py)
PEAK_COLUMNS = ["link_peak_GBps", "busbw_pct_of_peak"]
PARQUET_FILE = "results.parquet"
