"""Results on disk: one CSV row per measurement, appended as it is made, plus meta.json.

Rank 0 is the only writer. Each row is written and flushed to disk as soon as its size
finishes, so a crash or Ctrl-C loses at most the size in flight and the file stays a valid CSV.
"""
from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from .errors import UsageError

COLUMNS = [
    "run_id", "timestamp", "tag", "benchmark", "algorithm", "backend", "device", "dtype",
    "world_size", "nodes", "ranks_per_node", "size_bytes", "count", "iters", "warmup",
    "time_us_median", "time_us_mean", "time_us_p95", "time_us_min", "time_us_max",
    "algbw_GBps", "busbw_GBps", "wrong",
    # benchmark = ddp rows (ddp_bench.py): what was timed, DDP's bucket cap, micro-batches per
    # optimizer step, bucket sizes in ready order, and the AllReduce calls/bytes the hook counted
    "measure", "bucket_mb", "accum", "bucket_sizes", "allreduce_calls", "allreduce_bytes",
    # emulate: the emulated cluster ('2x2@350Mbit'); links: link = intra|inter, operation
    "emulation", "link", "operation",
]
REQUIRED = ["algorithm", "world_size", "size_bytes", "time_us_median", "busbw_GBps"]
RESULTS_FILE, META_FILE = "results.csv", "meta.json"


def drop_partial_last_row(path: Path) -> bool:
    """Cut a half-written last line (a writer killed mid-row); True if one was dropped."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return False
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())
    return True


class ResultsWriter:
    """Appends rows to <out_dir>/results.csv, writing the header once."""

    def __init__(self, out_dir: Path, columns: list[str] = COLUMNS):
        self.path = Path(out_dir) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_row(self.path)  # never glue a new row onto a killed writer's half row
        self.columns = self._columns_of_existing_file(columns)

    def _columns_of_existing_file(self, columns: list[str]) -> list[str]:
        """Rows are appended under the header already in the file. A file written by an older
        version, with fewer columns, is rewritten once (atomically) with the missing ones
        added at the end, so old and new rows stay one valid CSV."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return columns
        with open(self.path, newline="") as f:
            header = next(csv.reader(f), [])
        missing = [c for c in columns if c not in header]
        if not missing:
            return header
        with open(self.path, newline="") as f:
            rows = list(csv.DictReader(f))
        merged = header + missing
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=merged, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(self.path)
        return merged

    def append(self, row: dict) -> None:
        new = not self.path.exists() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)
            f.flush()
            os.fsync(f.fileno())


def write_meta(out_dir: Path, meta: dict) -> None:
    path = Path(out_dir) / META_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def start_meta(out_dir: Path, meta: dict) -> None:
    """Write a new run's meta.json; an earlier run's (another run_id, whose rows stay in
    results.csv) is kept inside it under `earlier_runs` rather than lost."""
    stored = read_meta(out_dir)
    if stored.get("run_id") not in (None, meta.get("run_id")):
        meta = {**meta, "earlier_runs": stored.pop("earlier_runs", []) + [stored]}
    write_meta(out_dir, meta)


def read_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / META_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def update_meta(out_dir: Path, **fields) -> None:
    meta = read_meta(out_dir)
    meta.update(fields)
    write_meta(out_dir, meta)


def _csv_path(path: Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.exists():
        raise UsageError(f"no results at {path}; give a run directory or its results.csv")
    return path


def load_results(paths: Path | str | Iterable[Path | str]) -> pd.DataFrame:
    """The rows of one or more runs (directories or results.csv files) as one DataFrame."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for path in paths:
        csv_path = _csv_path(Path(path))
        try:
            frame = pd.read_csv(csv_path)
        except pd.errors.EmptyDataError:
            frame = pd.DataFrame()
        except (pd.errors.ParserError, UnicodeDecodeError):
            raise UsageError(f"{csv_path} is not a CSV file; give a run directory or its "
                             "results.csv") from None
        missing = [c for c in REQUIRED if c not in frame.columns]
        if missing:
            raise UsageError(f"{csv_path} is not an allreduce-bench results file: missing columns "
                             f"{', '.join(missing)}")
        if frame.empty:
            raise UsageError(f"{csv_path} has no rows; run a benchmark first")
        frame["source"] = str(csv_path.parent)
        frames.append(frame)
    if not frames:
        raise UsageError("no results given")
    frame = pd.concat(frames, ignore_index=True)
    if "tag" in frame.columns:
        frame["tag"] = frame["tag"].astype("object").where(frame["tag"].notna(), "").astype(str)
    return frame
