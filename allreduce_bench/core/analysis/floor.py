"""A floor on the bus bandwidth, judged as nccl-tests judges NCCL_TESTS_MIN_BW: a table fails where
the plain mean of its rows' busbw is below 90% of it (nccl-tests src/common.cu)."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.analysis.tables import text_column

# nccl-tests fails a run whose average is below this share of NCCL_TESTS_MIN_BW
FLOOR_SHARE = 0.9
# what keeps two tables apart, where the rows have it (links: link and operation)
TABLE_KEY = ["collective", "algorithm", "world_size", "link", "operation"]


def table_averages(frame: pd.DataFrame) -> pd.DataFrame:
    """One line per table: its name and the plain mean of its rows' busbw (GB/s)."""
    frame = frame.copy()
    key = [c for c in TABLE_KEY if c in frame.columns]
    for column in key:
        if column != "world_size":
            frame[column] = text_column(frame, column)
    means = frame.groupby(key, sort=False)["busbw_GBps"].mean().reset_index()
    means["table"] = [" ".join(f"N={v}" if c == "world_size" else str(v) for c, v in zip(key, row) if v != "")
                      for row in means[key].itertuples(index=False)]
    return means.rename(columns={"busbw_GBps": "avg_busbw_GBps"})[["table", "avg_busbw_GBps"]]


def footer_lines(averages: pd.DataFrame, floor_GBps: float) -> list[str]:
    """nccl-tests' footer line per table, so `grep 'Avg bus bandwidth' | awk '{print $6}'` reads it."""
    return [f"# {'Avg bus bandwidth':<20} : {row.avg_busbw_GBps:g} "
            f"{'FAILED' if below(row.avg_busbw_GBps, floor_GBps) else 'OK'}  ({row.table})"
            for row in averages.itertuples()]


def below(average_GBps: float, floor_GBps: float) -> bool:
    """nccl-tests' verdict: below 90% of the floor fails (an empty average fails too)."""
    return not average_GBps >= floor_GBps * FLOOR_SHARE


def verdict_lines(averages: pd.DataFrame, floor_GBps: float) -> list[str]:
    return [f"FAILED: {row.table}: average bus bandwidth {row.avg_busbw_GBps:g} GB/s is below "
            f"{FLOOR_SHARE:.0%} of --min-busbw {floor_GBps:g} GB/s"
            for row in averages.itertuples() if below(row.avg_busbw_GBps, floor_GBps)]
