"""Which rows a run directory already holds, read the way resume needs them: whole rows only.

A resumed run keeps the stored run id, skips every (algorithm, world size, size) already in
results.csv and appends the rest; a torn last line (a writer killed mid-row) is never a row.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from allreduce_bench.core.metrics import COLLECTIVES, IN_PLACE, IN_PLACE_HALVES
from allreduce_bench.core.results.schema import RESULTS_FILE
from allreduce_bench.core.results.store import repair_tail as repair_tail  # the writers' guard, by its old name
from allreduce_bench.core.results.store import whole_rows

Key = tuple[str, int, int]  # (algorithm, world_size, size_bytes)
# the benchmarks of `run`'s rows: AllReduce's, the other collectives' and their --in-place halves
RUN_BENCHMARKS = ("allreduce", *COLLECTIVES, *(c + IN_PLACE for c in IN_PLACE_HALVES))


def _whole_rows(out_dir: Path, errors: str = "replace") -> list[dict]:
    """results.csv's whole rows (store.whole_rows: a torn last line is never a row)."""
    whole, _ = whole_rows(Path(out_dir) / RESULTS_FILE)
    return list(csv.DictReader(io.StringIO(whole.decode("utf-8", errors=errors), newline="")))


def benchmarks_of(out_dir: Path, run_id: str) -> set[str]:
    """The benchmarks whose rows of `run_id` are in results.csv; UnicodeDecodeError or
    csv.Error when it is not a readable CSV file."""
    return {row.get("benchmark") or "allreduce" for row in _whole_rows(out_dir, "strict")
            if row.get("run_id") == run_id}


def _name(row: dict) -> str:
    """AllReduce rows by their algorithm; other collectives' as benchmark/algorithm, the label
    sweep/collectives.py asks about (ring of AllGather is not ring of AllReduce, nor of
    AllGather in place: all_gather-in-place/ring)."""
    benchmark = row.get("benchmark") or "allreduce"
    return row["algorithm"] if benchmark == "allreduce" else f"{benchmark}/{row['algorithm']}"


def done_keys(out_dir: Path, run_id: str) -> set[Key]:
    """(algorithm, world_size, size_bytes) of the rows of `run_id` already in results.csv
    (algorithm as `_name` labels it)."""
    return {(_name(row), int(row["world_size"]), int(row["size_bytes"]))
            for row in _whole_rows(out_dir)
            if row.get("run_id") == run_id and None not in row.values()  # every column
            and row.get("benchmark", "allreduce") in ("", *RUN_BENCHMARKS)
            and (row.get("world_size") or "").isdigit() and (row.get("size_bytes") or "").isdigit()}


def count_rows(out_dir: Path) -> int:
    """Whole rows in results.csv: a torn last line (disk full, a killed writer) is not a row."""
    return len(_whole_rows(out_dir))


def kept(out_dir: Path, how_to_continue: str | None = None) -> str:
    """What a stopped run left on disk, and the way on (`--resume DIR`, say) where it has one."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return f"no rows were written to {out_dir}"
    rows = count_rows(out_dir)
    return f"{rows} row(s) kept in {path}" + (f"; continue with {how_to_continue}"
                                             if how_to_continue and rows else "")
