"""Reading stored results back: one or many runs as one DataFrame, and their raw samples."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from allreduce_bench.errors import UsageError
from allreduce_bench.results.schema import REQUIRED, RESULTS_FILE, SAMPLE_COLUMNS, SAMPLES_DIR


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
        frames.append(upgrade(frame))
    if not frames:
        raise UsageError("no results given")
    frame = pd.concat(frames, ignore_index=True)
    if "tag" in frame.columns:
        frame["tag"] = frame["tag"].astype("object").where(frame["tag"].notna(), "").astype(str)
    return frame


def upgrade(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of older files in today's terms, explicitly. Schema 1 (before `timing`): every
    iteration was one call timed alone after a barrier, so samples = iters and loops = 1, and
    there is no p5, spread or per-rank figure (left empty, never guessed)."""
    if "timing" not in frame.columns:
        frame = frame.copy()
        frame["timing"] = "per-iteration"
        if "iters" in frame.columns:
            frame["samples"] = frame["iters"]
        frame["loops"] = 1
    else:  # files mixing both (a v1 file appended to by v2): fill the v1 rows only
        old = frame["timing"].isna()
        if old.any():
            frame = frame.copy()
            frame.loc[old, "timing"] = "per-iteration"
            if "iters" in frame.columns:
                frame.loc[old, "samples"] = frame.loc[old, "iters"]
            frame.loc[old, "loops"] = 1
    return frame


def load_samples(paths: Path | str | Iterable[Path | str]) -> pd.DataFrame:
    """The raw per-rank samples of one or more runs (run directories, or their results.csv):
    one row per (measurement, sample, rank); empty (with the columns) where none were kept."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for path in paths:
        run_dir = Path(path) if Path(path).is_dir() else Path(path).parent
        parts = sorted((run_dir / SAMPLES_DIR).glob("part-*.parquet"))
        if parts:
            frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
            frame["source"] = str(run_dir)
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=SAMPLE_COLUMNS + ["source"])
    return pd.concat(frames, ignore_index=True)
