"""Results on disk: one CSV row per measurement, flushed as it is made (a crash loses at most the
size in flight), plus meta.json; rank 0 is the only writer."""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.schema import (
    COLUMNS,
    META_FILE,
    PARQUET_FILE,
    RESULTS_FILE,
    SAMPLES_DIR,
    SCHEMA_VERSION,
    read_results_csv,
)


def whole_rows(path: Path) -> tuple[bytes, bool]:
    """The bytes up to the last newline, and whether a torn line followed: the one test of a torn row."""
    data = path.read_bytes() if path.exists() else b""
    end = data.rfind(b"\n") + 1
    return data[:end], end < len(data)


def repair_tail(out_dir: Path) -> bool:
    """Cut a torn last row off <out_dir>/results.csv; True if one was dropped."""
    path = Path(out_dir) / RESULTS_FILE
    whole, torn = whole_rows(path)
    if torn:
        with open(path, "rb+") as f:
            f.truncate(len(whole))
            os.fsync(f.fileno())
    return torn


class DiskFullError(OSError):
    """Writing a row failed (disk full, quota, I/O error); the file was cut back to its last whole row."""


class ResultsWriter:
    """Appends rows to <out_dir>/results.csv, writing the header once."""

    def __init__(self, out_dir: Path, columns: list[str] = COLUMNS):
        self.path = Path(out_dir) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path.parent)  # never glue a new row onto a killed writer's half row
        self.columns = self._columns_of_existing_file(columns)

    def _columns_of_existing_file(self, columns: list[str]) -> list[str]:
        """The file's header; an older file lacking columns is rewritten once with them at the end."""
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
        """Append one row all or nothing: a failed write (ENOSPC) is cut back and named."""
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.columns, extrasaction="ignore")
        if not self.path.exists() or self.path.stat().st_size == 0:
            writer.writeheader()
        writer.writerow(row)
        data = text.getvalue().encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            before = os.fstat(fd).st_size
            written = 0
            while written < len(data):  # unbuffered: nothing is left to fail at close
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError as error:
            try:
                os.ftruncate(fd, before)  # no torn row: the file ends with its last whole row
            except OSError:
                pass
            raise DiskFullError(error.errno, error.strerror, str(self.path)) from None
        finally:
            os.close(fd)


def write_meta(out_dir: Path | str, meta: dict) -> None:
    write_json(Path(out_dir) / META_FILE, meta)


def write_json(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(document, indent=2, default=str) + "\n")
        tmp.replace(path)  # atomic: a reader never sees half a file
    except OSError as error:  # disk full: the old file stays whole; say which one
        tmp.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None


def start_meta(out_dir: Path, meta: dict) -> None:
    """Write a new run's meta.json, keeping an earlier run's (whose rows stay) under `earlier_runs`."""
    meta = {"schema_version": SCHEMA_VERSION, **meta}
    stored = read_meta(out_dir)
    if stored.get("run_id") not in (None, meta.get("run_id")):
        meta = {**meta, "earlier_runs": stored.pop("earlier_runs", []) + [stored]}
    write_meta(out_dir, meta)


def read_meta(run_dir: Path | str) -> dict:
    """meta.json as a dict ({} when there is none); a damaged one is one line naming it."""
    path = Path(run_dir) / META_FILE
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        what = "is empty" if path.stat().st_size == 0 else f"is not valid JSON ({error})"
        raise UsageError(f"{path} {what}: it is damaged or was not written by allreduce-bench; "
                         "restore it, or move it away to start afresh") from None
    except OSError as error:
        raise UsageError(f"{path} cannot be read ({error.strerror})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{path} is not a JSON object: it was not written by allreduce-bench; "
                         "move it away to start afresh")
    return meta


def update_meta(out_dir: Path, **fields) -> None:
    meta = read_meta(out_dir)
    meta.update(fields)
    write_meta(out_dir, meta)


class SamplesWriter:
    """Appends each measurement's raw samples as a part of <out_dir>/samples.parquet/, renamed into
    place whole, so a killed run keeps every finished part."""

    def __init__(self, out_dir: Path):
        self.dir = Path(out_dir) / SAMPLES_DIR
        self._next: int | None = None

    def append(self, frame: pd.DataFrame) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._next is None:
            parts = [int(p.stem.split("-")[1]) for p in self.dir.glob("part-*.parquet")]
            self._next = max(parts, default=-1) + 1
        path = self.dir / f"part-{self._next:06d}.parquet"
        tmp = self.dir / f".{path.name}.tmp"
        frame.to_parquet(tmp, index=False)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        tmp.replace(path)
        self._next += 1
        return path


def parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """One Arrow type per column: mixed text columns become strings, True/False nullable booleans."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype != object:
            continue
        values = frame[column].dropna()
        if values.empty:
            frame[column] = frame[column].astype("float64")  # an empty column: no values, no type
        elif values.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all():
            frame[column] = pd.to_numeric(frame[column])
        elif values.map(lambda v: isinstance(v, bool)).all():
            frame[column] = frame[column].astype("boolean")
        else:
            frame[column] = frame[column].map(lambda v: None if v is None or v != v else str(v))
    return frame


def write_parquet(out_dir: Path, frame: pd.DataFrame | None = None) -> Path:
    """results.parquet beside results.csv: `frame`, or the CSV as it is now; renamed into place whole."""
    out_dir = Path(out_dir)
    if frame is None:
        frame = read_results_csv(out_dir / RESULTS_FILE)
    path = out_dir / PARQUET_FILE
    tmp = out_dir / f".{PARQUET_FILE}.tmp"
    parquet_safe(frame).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def start_meta_unless_launched(config: Any, meta: Callable[[Any], dict]) -> None:
    """A local run's driver starts meta.json; under a launcher rank 0 does (measure/rank.py)."""
    from allreduce_bench.core.environment import launcher_env

    if launcher_env() is None:
        start_meta(config.launch.out_dir, meta(config))


def replace_own(folder: Path, own: Callable[[Path], bool], force: bool, option: str,
                any_file: bool = False) -> None:
    """Refuse in one line to write into `folder` where an earlier output (the files `own` names; with
    `any_file`, anything) lies, so two never mix; with `force`, remove those files, never another."""
    entries = sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []
    held = entries if any_file else [p for p in entries if own(p)]
    if held and not force:
        raise UsageError(f"{folder} is not empty ({len(held)} file(s)); give a new {option}, or "
                         "--force to replace the earlier output")
    for path in entries if force else ():
        if path.is_file() and own(path):
            path.unlink()
