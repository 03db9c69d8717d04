"""Which rows are AllReduce measurements: the filter every analysis shares."""
from __future__ import annotations

import pandas as pd


def allreduce_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The `run` rows (benchmark = allreduce; files from before that column count as such)."""
    if "benchmark" in frame.columns:
        frame = frame[frame["benchmark"].fillna("allreduce") == "allreduce"]
    return frame
