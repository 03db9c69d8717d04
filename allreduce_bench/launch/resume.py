"""Continuing an interrupted run: which rows exist, and whether the new run measures the same way.

A resumed run keeps the stored run id, skips every (algorithm, world size, size) already in
results.csv and appends the rest, so the finished directory holds the same set of rows an
uninterrupted run would. Extending the sweep (more sizes, algorithms or world sizes) is allowed;
changing how each row is measured is not.
"""
from __future__ import annotations

import csv
from dataclasses import asdict, is_dataclass
from pathlib import Path

from allreduce_bench.errors import UsageError
from allreduce_bench.results.schema import META_FILE, RESULTS_FILE

# What makes two rows comparable: change one and the old rows measure something else.
from allreduce_bench.results.store import drop_partial_last_row, read_meta

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
    if "run_id" not in meta or "config" not in meta:
        raise UsageError(f"--resume {resume_dir}: {META_FILE} has no run_id/config; it was not "
                         "written by allreduce-bench run")
    return meta


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
    with open(path, newline="") as f:
        return {(row["algorithm"], int(row["world_size"]), int(row["size_bytes"]))
                for row in csv.DictReader(f)
                if row.get("run_id") == run_id and None not in row.values()  # a whole row
                and row.get("benchmark", "allreduce") in ("allreduce", "")
                and (row.get("world_size") or "").isdigit() and (row.get("size_bytes") or "").isdigit()}


def count_rows(out_dir: Path) -> int:
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return 0
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))
