"""The `ddp_timeline` table: <run dir>/ddp_timeline.csv, one row per span of the slowest rank's measured
steps (doc/ddp.md), appended by rank 0 as each bucket cap finishes."""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from allreduce_bench.core.results.schema import read_results_csv

TIMELINE_FILE = "ddp_timeline.csv"
TIMELINE_COLUMNS = ["run_id", "world_size", "bucket_mb", "measure", "rank", "iteration",
                    "step_us", "span", "bucket", "bytes", "start_us", "end_us"]


def append_timeline(out_dir: Path | str, rows: list[dict]) -> Path:
    """Append rows (dicts with TIMELINE_COLUMNS) to the run's timeline, header written once."""
    path = Path(out_dir) / TIMELINE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TIMELINE_COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return path


def read_timeline(run_dir: Path | str, run_id: str | None = None) -> pd.DataFrame:
    """The timeline of a run directory (of one run_id if given); empty if it has none."""
    path = Path(run_dir) / TIMELINE_FILE
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    frame = read_results_csv(path)
    if run_id is not None:
        frame = frame[frame["run_id"] == str(run_id)]  # read as text
    return frame
