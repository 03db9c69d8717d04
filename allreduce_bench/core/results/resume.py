"""Which rows a run directory already holds, whole rows only, so a resumed run skips them."""
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
    whole, _ = whole_rows(Path(out_dir) / RESULTS_FILE)
    return list(csv.DictReader(io.StringIO(whole.decode("utf-8", errors=errors), newline="")))


def benchmarks_of(out_dir: Path, run_id: str) -> set[str]:
    """The benchmarks of `run_id`'s rows; UnicodeDecodeError or csv.Error for an unreadable file."""
    return {row.get("benchmark") or "allreduce" for row in _whole_rows(out_dir, "strict")
            if row.get("run_id") == run_id}


def _name(row: dict) -> str:
    """AllReduce rows by their algorithm, others as benchmark/algorithm (as sweep/collectives.py asks)."""
    benchmark = row.get("benchmark") or "allreduce"
    return row["algorithm"] if benchmark == "allreduce" else f"{benchmark}/{row['algorithm']}"


def done_keys(out_dir: Path, run_id: str) -> set[Key]:
    """(algorithm as `_name` labels it, world_size, size_bytes) of `run_id`'s rows."""
    return {(_name(row), int(row["world_size"]), int(row["size_bytes"]))
            for row in _whole_rows(out_dir)
            if row.get("run_id") == run_id and None not in row.values()  # every column
            and row.get("benchmark", "allreduce") in ("", *RUN_BENCHMARKS)
            and (row.get("world_size") or "").isdigit() and (row.get("size_bytes") or "").isdigit()}


def count_rows(out_dir: Path) -> int:
    return len(_whole_rows(out_dir))


def kept(out_dir: Path, how_to_continue: str | None = None) -> str:
    """What a stopped run left on disk, and the way on (`--resume DIR`, say) where it has one."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return f"no rows were written to {out_dir}"
    rows = count_rows(out_dir)
    return f"{rows} row(s) kept in {path}" + (f"; continue with {how_to_continue}"
                                             if how_to_continue and rows else "")
