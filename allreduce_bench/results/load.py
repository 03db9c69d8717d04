"""Reading stored results back: one or many runs as one DataFrame, and their raw samples."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from allreduce_bench.errors import UsageError
from allreduce_bench.results.schema import REQUIRED, RESULTS_FILE
from allreduce_bench.results.validate import check_results


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
        frame = check_results(frame, csv_path)  # torn last row dropped; damage is one line
        frame["source"] = str(csv_path.parent)
        frames.append(frame)
    if not frames:
        raise UsageError("no results given")
    frame = pd.concat(frames, ignore_index=True)
    if "tag" in frame.columns:
        frame["tag"] = frame["tag"].astype("object").where(frame["tag"].notna(), "").astype(str)
    return frame
