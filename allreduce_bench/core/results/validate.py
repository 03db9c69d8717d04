"""Stored results checked as they are read: a damaged file is one line naming what is wrong, never a traceback."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import RowKind
from allreduce_bench.core.results.store import whole_rows

# Every row of every benchmark has these, as numbers.
ALWAYS_NUMERIC = ["world_size", "size_bytes", "time_us_median"]
# Numbers where present (a ddp row has no busbw for compute alone).
NUMERIC = ALWAYS_NUMERIC + [
    "nodes", "ranks_per_node", "count", "iters", "warmup", "time_us_mean", "time_us_p95", "time_us_p99",
    "time_us_min", "time_us_max", "algbw_GBps", "busbw_GBps", "wrong", "bucket_mb", "accum",
    "allreduce_calls", "allreduce_bytes", "samples", "loops", "time_us_p5", "time_cv",
    "time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us", "skew_share",
    "time_us_ci_low", "time_us_ci_high", "fast_us_median", "fast_share", "slow_us_median",
    "slow_share"]

# Counts, read back as whole numbers by the tables.
WHOLE = ["nodes", "ranks_per_node", "count", "iters", "warmup", "samples", "loops"]


def check_results(frame: pd.DataFrame, csv_path: Path, kinds: tuple[RowKind, ...] = ()) -> pd.DataFrame:
    """The rows with a torn last row dropped; UsageError for a damaged file (or a `kinds` row lacking a column)."""
    if csv_path.suffix == ".csv" and whole_rows(csv_path)[1] and len(frame):  # Parquet is whole
        print(f"allreduce-bench: note: {csv_path}: ignored its half-written last line",
              file=sys.stderr)
        frame = frame.iloc[:-1]
        if frame.empty:
            return frame
    frame = frame.copy()

    def refuse(bad: pd.Series, what) -> None:
        if bad.any():
            at = bad[bad].index[0]
            raise UsageError(f"{csv_path} row {int(at) + 1}{what(at)}; the file is damaged or was "
                             "edited: remove that row (or restore the file)")

    refuse(frame["algorithm"].isna() | (frame["algorithm"].astype(str).str.strip() == ""),
           lambda at: " has no algorithm")
    for column in [c for c in NUMERIC if c in frame.columns]:
        raw, numbers = frame[column], pd.to_numeric(frame[column], errors="coerce")
        refuse(numbers.isna() & (raw.notna() if column not in ALWAYS_NUMERIC else True),
               lambda at: f": {column} is {raw[at]!r}, not a number")
        frame[column] = numbers
    # counted things and times are finite: `1e400` parses as infinity, and no run has it
    for column in [c for c in ALWAYS_NUMERIC + WHOLE if c in frame.columns]:
        refuse(frame[column].abs() == float("inf"),
               lambda at: f": {column} is {float(frame[column][at]):g}, not a finite number")
    for kind in kinds:
        missing = [c for c in kind.needs if c not in frame.columns]
        if missing and "benchmark" in frame.columns and (frame["benchmark"] == kind.benchmark).any():
            raise UsageError(f"{csv_path} has benchmark={kind.benchmark} rows but no {missing[0]} "
                             "column; the file is damaged or was edited: remove that row (or restore the file)")
    # nccl-tests prints zero-byte rows (imported as they are); no run has a world of 0 ranks
    for column, least in (("world_size", 1), ("size_bytes", 0)):
        refuse(frame[column] < least, lambda at: f": {column} is {frame[column][at]!r}, below {least}")
    return frame
