"""Checks before continuing an interrupted run: a run of this command, measured the same way
(the sweep may grow; --in-place adds rows of their own, so it is no MEASUREMENT_FIELDS entry)."""
from __future__ import annotations

import csv
import sys
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import RowKind
from allreduce_bench.core.results.resume import RUN_BENCHMARKS, benchmarks_of, count_rows
from allreduce_bench.core.results.schema import META_FILE, RESULTS_FILE
from allreduce_bench.core.results.store import read_meta
from allreduce_bench.core.text import wrapped

# What makes two rows comparable: change one and the old rows measure something else.
MEASUREMENT_FIELDS = {"dtype": "--dtype", "sampling": "--loops/--samples/--budget/--warmup",
                      "backend": "--backend", "device": "--device",
                      "ranks_per_node": "--ranks-per-node", "tag": "--tag", "rounds": "--rounds",
                      "sched": "--sched"}


def stored_run(resume_dir: Path, emulated: bool, kinds: tuple[RowKind, ...]) -> dict:
    """meta.json of the run to resume (by a host of `emulate`: `emulated`)."""
    if not (Path(resume_dir) / META_FILE).exists():
        raise UsageError(f"--resume {resume_dir}: no {META_FILE} there; give the directory of an "
                         "earlier run (the --out it wrote to)")
    meta = read_meta(resume_dir)
    if "run_id" not in meta or not isinstance(meta.get("config"), dict):
        raise UsageError(f"--resume {resume_dir}: {META_FILE} has no run_id/config; it was not "
                         "written by allreduce-bench run")
    check_is_allreduce_run(meta, resume_dir, emulated, kinds)
    return meta


def check_is_allreduce_run(meta: dict, resume_dir: Path, emulated: bool,
                           kinds: tuple[RowKind, ...]) -> None:
    """`run --resume` continues `run`'s runs only (not the features' `kinds`), an emulated one under `emulate`."""
    try:
        others = benchmarks_of(resume_dir, meta["run_id"]) - set(RUN_BENCHMARKS)
    except (UnicodeDecodeError, csv.Error):
        raise UsageError(f"--resume {resume_dir}: {Path(resume_dir) / RESULTS_FILE} is not a "
                         "readable CSV file; resume only a directory written by allreduce-bench") from None
    marked = [kind.benchmark for kind in kinds if kind.meta_block and kind.benchmark in meta]
    if marked or others:
        kind = (marked or sorted(others))[0]
        raise UsageError(f"--resume {resume_dir} is a `{kind}` run, not one of `run`; rerun "
                         f"`allreduce-bench {kind}` with a new --out instead")
    if "emulation" in meta and not emulated:
        raise UsageError(f"--resume {resume_dir} is an emulated run; continue it with "
                         f"`allreduce-bench emulate --resume {resume_dir} ...`")


def note_earlier_runs(out_dir: Path) -> None:
    """Say so when a new run's rows will go beside an earlier run's (no --resume given)."""
    rows = count_rows(out_dir)
    if rows:
        print(wrapped(f"allreduce-bench: note: {Path(out_dir) / RESULTS_FILE} already holds {rows} "
                      "row(s) of an earlier run; this run adds its rows beside them under a new run_id "
                      f"(to continue that run instead, use --resume {out_dir})"), file=sys.stderr)


def _plain(value):
    return asdict(value) if is_dataclass(value) else value


def measurement_fields(config: RunConfig) -> dict:
    """MEASUREMENT_FIELDS of `config` as meta.json stores them (its launch's fields included)."""
    flat = {**asdict(config.launch), **{f.name: getattr(config, f.name) for f in fields(config)}}
    return {field: _plain(flat[field]) for field in MEASUREMENT_FIELDS}


def check_same_measurement(stored: dict, config: RunConfig, resume_dir: Path) -> None:
    old = stored.get("config", {})
    if "sampling" not in old:
        raise UsageError(f"--resume {resume_dir} was measured by an older allreduce-bench (one call "
                         "per timed iteration); its rows and new ones would mix timing methods. "
                         "Start a new --out (plot and report still read the old run)")
    now_fields = measurement_fields(config)
    if isinstance(old.get("sampling"), dict) and set(now_fields["sampling"]) - set(old["sampling"]):
        raise UsageError(f"--resume {resume_dir} was measured by an older allreduce-bench (before "
                         "schema 4 its loops ignored the barrier's exit skew); its rows and new "
                         "ones would mix calibrations. Start a new --out (plot, report and "
                         "compare still read the old run)")
    differ = [(flag, old.get(field), now_fields[field])
              for field, flag in MEASUREMENT_FIELDS.items()
              if field in old and old.get(field) != now_fields[field]]
    if differ:
        was = " ".join(f"{flag} {value!r}" for flag, value, _ in differ)
        now = " ".join(f"{flag} {value!r}" for flag, _, value in differ)
        raise UsageError(f"--resume {resume_dir} was measured with {was} but this run has {now}; "
                         "rerun with the original options or write to a new --out")
