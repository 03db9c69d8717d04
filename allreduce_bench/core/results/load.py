"""Reading stored results back: one or many runs as one DataFrame (results.parquet where it is
at least as new as results.csv), and their raw samples."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import RowKind
from allreduce_bench.core.metrics import COLLECTIVES
from allreduce_bench.core.results.schema import (
    META_FILE,
    PARQUET_FILE,
    REQUIRED,
    RESULTS_FILE,
    SAMPLE_COLUMNS,
    SAMPLES_DIR,
    SCHEMA_2_NAMES,
    read_results_csv,
)
from allreduce_bench.core.results.validate import check_results


def _newest(run_dir: Path) -> Path | None:
    csv_path, parquet_path = run_dir / RESULTS_FILE, run_dir / PARQUET_FILE
    if parquet_path.exists() and (not csv_path.exists()
                                  or parquet_path.stat().st_mtime >= csv_path.stat().st_mtime):
        return parquet_path
    return csv_path if csv_path.exists() else None


def empty_runs(path: Path | str) -> list[str]:
    """A line per run folder at or directly below `path` that holds no rows, saying why it is skipped."""
    path = Path(path)
    if not path.is_dir() or _newest(path) is not None:
        return []
    folders = [path] + sorted(p for p in path.iterdir() if p.is_dir())
    return [f"skipped {d}: " + ("meta.json alone (stopped before its first row)" if (d / META_FILE).exists()
                                else "an empty folder (a command refused before it measured)")
            for d in folders if ((d / META_FILE).exists() or not any(d.iterdir()))
            and not any(d.rglob(RESULTS_FILE)) and not any(d.rglob(PARQUET_FILE))]


def result_files(path: Path | str) -> list[Path]:
    """The results file of a run directory, the file itself, or those of every run below."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        if (found := _newest(path)) is not None:
            return [found]
        below = sorted({p.parent for pattern in (RESULTS_FILE, PARQUET_FILE)
                        for p in path.rglob(pattern)})
        if below or empty_runs(path):
            return [found for d in below if (found := _newest(d)) is not None]
    raise UsageError(f"no results at {path}; give a run directory, its results.csv or "
                     "results.parquet, or a folder of runs")


def _read(path: Path) -> pd.DataFrame:
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return read_results_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as error:
        kind = "Parquet" if path.suffix == ".parquet" else "CSV"
        raise UsageError(f"{path} is not a {kind} results file ({str(error).splitlines()[0][:100]}); "
                         "give a run directory or its results file") from None


def load_results(paths: Path | str | Iterable[Path | str], explain_skips: bool = True,
                 kinds: tuple[RowKind, ...] = ()) -> pd.DataFrame:
    """The rows of one or more runs as one DataFrame, `source` naming each row's run directory; with
    `explain_skips`, a note on stderr on the rows no analysis reads. `kinds`: the features' rows."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames, skipped = [], []
    for path in paths:
        skipped += empty_runs(path)
        for file in result_files(path):
            frame = _read(file)
            missing = [c for c in REQUIRED if c not in frame.columns]
            if missing and not frame.empty:
                raise UsageError(f"{file} is not an allreduce-bench results file: missing columns "
                                 f"{', '.join(missing)}")
            frame = check_results(frame, file, kinds) if len(frame) else frame  # torn row dropped
            if frame.empty:
                skipped.append(f"skipped {file}: no rows")
                continue
            frame["source"] = str(file.parent)
            frames.append(upgrade(frame))
    for line in skipped if frames else ():
        print(f"allreduce-bench: note: {line}", file=sys.stderr)
    if not frames:
        raise UsageError(f"no rows to read ({'; '.join(skipped)}); run a benchmark first" if skipped
                         else "no results given")
    frame = pd.concat(frames, ignore_index=True)
    if "tag" in frame.columns:
        frame["tag"] = frame["tag"].astype("object").where(frame["tag"].notna(), "").astype(str)
    if explain_skips and (note := skipped_note(frame, kinds)):
        print(f"allreduce-bench: note: {note}", file=sys.stderr)
    return frame


def upgrade(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of older files in today's terms (doc/results.md), nothing guessed."""
    old_names = {a: b for a, b in SCHEMA_2_NAMES.items() if a in frame.columns and b not in frame.columns}
    if old_names:
        frame = frame.rename(columns=old_names)
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
            frame["timing"] = frame["timing"].astype("object")  # an all-empty column reads as float
            frame.loc[old, "timing"] = "per-iteration"
            if "iters" in frame.columns:
                frame.loc[old, "samples"] = frame.loc[old, "iters"]
            frame.loc[old, "loops"] = 1
    return frame


def skipped_note(frame: pd.DataFrame, kinds: tuple[RowKind, ...] = ()) -> str | None:
    """Why the AllReduce-only analyses leave some rows out, or None."""
    if "benchmark" not in frame.columns:
        return None
    benchmark = frame["benchmark"].fillna("allreduce").astype(str)
    # other collectives' out-of-place rows have their own report section and figures
    read = ["allreduce", *COLLECTIVES, *(kind.benchmark for kind in kinds)]
    known = benchmark.isin(read) | benchmark.str.endswith("-in-place")
    parts = [f"{count} {name} rows" for name, count in benchmark[~known].value_counts().items()]
    text = (", ".join(parts) + " are none of the collectives measured here: the analyses skip them; "
            "`compare` reads them") if parts else ""
    # the other collectives' in-place halves are lines of their own in their tables and figures
    # (analysis/collective_tables.py); AllReduce's (an imported nccl-tests table) are not
    in_place = benchmark == "allreduce-in-place"
    if in_place.any():
        text += ("; " if text else "") + (f"in-place rows ({int(in_place.sum())} allreduce: "
                                          "nccl-tests' second half) are kept; the AllReduce "
                                          "analyses read the out-of-place half")
    return text or None


def load_samples(paths: Path | str | Iterable[Path | str]) -> pd.DataFrame:
    """The raw samples of one or more runs in SAMPLE_COLUMNS plus `source`; empty where none were kept."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for path in paths:
        path = Path(path)
        run_dir = path.parent if path.is_file() else path
        candidates = [run_dir / SAMPLES_DIR] if (run_dir / SAMPLES_DIR).is_dir() or _newest(run_dir) \
            else sorted(run_dir.rglob(SAMPLES_DIR))
        for directory in candidates:
            parts = sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []
            if not parts:
                continue
            try:
                frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
            except (OSError, ValueError) as error:
                raise UsageError(f"{directory} holds a part that is not Parquet ({error}); "
                                 "remove it or re-run") from None
            frame["source"] = str(directory.parent)
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=SAMPLE_COLUMNS + ["source"])
    return pd.concat(frames, ignore_index=True)
