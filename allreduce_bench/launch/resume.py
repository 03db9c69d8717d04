"""Continuing an interrupted run: which rows exist, and whether the new run measures the same way.

A resumed run keeps the stored run id, skips every (algorithm, world size, size) already in
results.csv and appends the rest, so the finished directory holds the same set of rows an
uninterrupted run would. Extending the sweep (more sizes, algorithms or world sizes) is allowed;
changing how each row is measured is not.
"""
from __future__ import annotations

import csv
import os
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

from allreduce_bench.errors import UsageError
from allreduce_bench.results.schema import META_FILE, RESULTS_FILE
from allreduce_bench.results.store import drop_partial_last_row, read_meta, whole_lines

# What makes two rows comparable: change one and the old rows measure something else.
MEASUREMENT_FIELDS = {"dtype": "--dtype", "sampling": "--loops/--samples/--budget/--warmup",
                      "backend": "--backend", "device": "--device",
                      "ranks_per_node": "--ranks-per-node", "tag": "--tag"}

Key = tuple[str, int, int]  # (algorithm, world_size, size_bytes)


def stored_run(resume_dir: Path) -> dict:
    """meta.json of the run to resume; a clear error when there is none."""
    if not (Path(resume_dir) / META_FILE).exists():
        raise UsageError(f"--resume {resume_dir}: no {META_FILE} there; give the directory of an "
                         "earlier run (the --out it wrote to)")
    meta = read_meta(resume_dir)
    if "run_id" not in meta or not isinstance(meta.get("config"), dict):
        raise UsageError(f"--resume {resume_dir}: {META_FILE} has no run_id/config; it was not "
                         "written by allreduce-bench run")
    check_is_allreduce_run(meta, resume_dir)
    return meta


def _benchmarks_of(out_dir: Path, run_id: str) -> set[str]:
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return set()
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return {row.get("benchmark") or "allreduce" for row in csv.DictReader(whole_lines(f))
                    if row.get("run_id") == run_id}
    except (UnicodeDecodeError, csv.Error):
        raise UsageError(f"--resume {out_dir}: {path} is not a readable CSV file; resume only "
                         "a directory written by allreduce-bench") from None


def check_is_allreduce_run(meta: dict, resume_dir: Path) -> None:
    """`run --resume` continues `run`'s runs only: a ddp, links or emulated run has other rows."""
    from allreduce_bench.emulate import EMULATION_ENV

    others = _benchmarks_of(resume_dir, meta["run_id"]) - {"allreduce"}
    if "ddp" in meta or others:
        kind = "ddp" if "ddp" in meta else sorted(others)[0]
        raise UsageError(f"--resume {resume_dir} is a `{kind}` run, not one of `run`; rerun "
                         f"`allreduce-bench {kind}` with a new --out instead")
    if "emulation" in meta and EMULATION_ENV not in os.environ:
        raise UsageError(f"--resume {resume_dir} is an emulated run; continue it with "
                         f"`allreduce-bench emulate --resume {resume_dir} ...`")


def note_earlier_runs(out_dir: Path) -> None:
    """Say so when a new run's rows will go beside an earlier run's (no --resume given)."""
    rows = count_rows(out_dir)
    if rows:
        print(f"allreduce-bench: note: {Path(out_dir) / RESULTS_FILE} already holds {rows} "
              "row(s) of an earlier run; this run adds its rows beside them under a new run_id "
              f"(to continue that run instead, use --resume {out_dir})", file=sys.stderr)


def _plain(value):
    """A config field as meta.json stores it (dataclasses as dicts)."""
    return asdict(value) if is_dataclass(value) else value


def check_same_measurement(stored: dict, config, resume_dir: Path) -> None:
    """Refuse to mix rows measured differently into one run."""
    old = stored.get("config", {})
    if "sampling" not in old:
        raise UsageError(f"--resume {resume_dir} was measured by an older allreduce-bench (one call "
                         "per timed iteration); its rows and new ones would mix timing methods. "
                         "Start a new --out (plot and report still read the old run)")
    now_fields = {field: _plain(getattr(config, field)) for field in MEASUREMENT_FIELDS}
    differ = [(flag, old.get(field), now_fields[field])
              for field, flag in MEASUREMENT_FIELDS.items()
              if field in old and old.get(field) != now_fields[field]]
    if differ:
        was = " ".join(f"{flag} {value!r}" for flag, value, _ in differ)
        now = " ".join(f"{flag} {value!r}" for flag, _, value in differ)
        raise UsageError(f"--resume {resume_dir} was measured with {was} but this run has {now}; "
                         "rerun with the original options or write to a new --out")


def repair_tail(out_dir: Path) -> bool:
    """Drop a half-written last line (a writer killed mid-row); True if one was dropped."""
    return drop_partial_last_row(Path(out_dir) / RESULTS_FILE)


def done_keys(out_dir: Path, run_id: str) -> set[Key]:
    """(algorithm, world_size, size_bytes) of the rows of `run_id` already in results.csv."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return set()
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return {(row["algorithm"], int(row["world_size"]), int(row["size_bytes"]))
                for row in csv.DictReader(f)
                if row.get("run_id") == run_id and None not in row.values()  # a whole row
                and row.get("benchmark", "allreduce") in ("allreduce", "")
                and (row.get("world_size") or "").isdigit() and (row.get("size_bytes") or "").isdigit()}


def count_rows(out_dir: Path) -> int:
    """Whole rows in results.csv: a torn last line (disk full, a killed writer) is not a row."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return sum(1 for _ in csv.DictReader(whole_lines(f)))
