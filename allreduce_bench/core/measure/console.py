"""What rank 0 shows while measuring: a progress bar and nccl-tests style tables."""
from __future__ import annotations

import sys
from collections.abc import Callable

from tqdm import tqdm

from allreduce_bench.core.units import format_size

# time: median of the slowest rank's time per call (p99 as nccl-tests -I's i_p99); rank-mean: what
# nccl-tests would print; cv: spread over samples; samples x loops calls were timed
HEADER = (
    f"#{'size':>11} {'count':>12} {'type':>9} {'time':>10} {'p95':>10} {'p99':>10} {'rank-mean':>10} "
    f"{'cv':>6} {'samples':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7}\n"
    f"#{'(B)':>11} {'(elements)':>12} {'':>9} {'(us)':>10} {'(us)':>10} {'(us)':>10} {'(us)':>10} "
    f"{'(%)':>6} {'x loops':>11} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"
)


def states_text(row: dict) -> str:
    """'two states: 172 us 62% / 2.05 ms 38%' for a row whose samples have two states, '' otherwise."""
    share = row.get("slow_share")
    if share is None or not share == share:  # None or NaN: one state
        return ""
    return (f"two states: {format_us(row['fast_us_median'])} {100 * row['fast_share']:.0f}% / "
            f"{format_us(row['slow_us_median'])} {100 * share:.0f}%")


def format_us(us: float) -> str:
    return f"{us / 1e3:.3g} ms" if us >= 1e3 else f"{us:.3g} us"


def format_row(row: dict) -> str:
    """The row in HEADER's columns; notes go on a `#` line below it."""
    counts = f"{row['samples']}x{row['loops']}"
    notes = "; ".join(part for part in ("unstable" if row.get("unstable") else "", states_text(row)) if part)
    return (f" {row['size_bytes']:>11} {row['count']:>12} {row['dtype']:>9} "
            f"{row['time_us_median']:>10.1f} {row['time_us_p95']:>10.1f} {row['time_us_p99']:>10.1f} "
            f"{row['time_us_rank_mean']:>10.1f} {100 * row['time_cv']:>6.1f} {counts:>11} "
            f"{row['algbw_GBps']:>8.3f} {row['busbw_GBps']:>8.3f} {row['wrong']:>7}"
            + (f"\n#   the row above: {notes}" if notes else ""))


# what is being done, how far, and the time left at the rate so far (tqdm's estimate)
BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}, ~{remaining} left]"


def progress_bar(total: int, unit: str, enabled: bool, description: str = "") -> tqdm:
    """A bar on stderr, drawn only on a terminal and when `enabled` (rank 0)."""
    return tqdm(total=total, unit=unit, desc=description, file=sys.stderr,
                disable=None if enabled else True, dynamic_ncols=True, leave=False,
                bar_format=BAR_FORMAT)


class Console:
    """Progress over every measurement and one table per (collective, algorithm, world size) once settled."""

    def __init__(self, total: int, enabled: bool = True, rounds: int = 1):
        self.enabled, self.rounds = enabled, rounds
        self.bar = progress_bar(total * rounds, "measurements", enabled)
        self._started = 0  # the measurement under way, counted once the next one starts
        self._rows: dict[str, list[dict]] = {}  # recorded, not yet shown

    def table(self, label: str, world) -> None:
        rows = sorted(self._rows.pop(label, []), key=lambda row: row["size_bytes"])
        if self.enabled and rows:
            tqdm.write(f"\n# {label}: world size {world.size} ({world.nodes} node(s) x "
                       f"{world.ranks_per_node} ranks), {world.device.kind}\n{HEADER}\n"
                       + "\n".join(map(format_row, rows)))

    def measuring(self, label: str, world_size: int, size_bytes: int, round_index: int) -> None:
        self.bar.update(self._started)
        self._started = 1
        if round_index >= self.rounds:  # an unstable row's extra round (sweep/passes.py)
            self.bar.total += 1
        rounds = (", extra round" if round_index >= self.rounds else
                  f", round {round_index + 1}/{self.rounds}" if self.rounds > 1 else "")
        self.bar.set_description(f"{label} N={world_size} {format_size(size_bytes)}{rounds}",
                                 refresh=False)

    def skipped(self) -> None:
        """A resumed run's finished row: none of its rounds is measured."""
        self.bar.update(self.rounds)

    def row(self, label: str, row: dict) -> None:
        self._rows.setdefault(label, []).append(row)

    def close(self) -> None:
        self.bar.update(self._started)
        self.bar.close()


def row_label(row: dict) -> str:
    """'N=4 step, bucket 25 MiB': which measurement a row is, from the fields it has."""
    parts = [f"N={row['world_size']}"] if "world_size" in row else []
    for field in ("link", "operation", "measure"):
        if row.get(field):
            parts.append(str(row[field]))
    bucket = row.get("bucket_mb")
    if isinstance(bucket, (int, float)) and bucket == bucket:  # ddp's rows; NaN elsewhere
        parts.append(f"bucket {bucket:g} MiB")
    if row.get("size_bytes") and not row.get("measure"):
        parts.append(format_size(row["size_bytes"]))
    return " ".join(parts)


class RowBar:
    """A benchmark's rows as a bar (rank 0, a terminal only); each row's own line prints above it."""

    def __init__(self, total: int, what: str, enabled: bool = True):
        self.what = what
        self.bar = progress_bar(total, "rows", enabled, what)

    def show(self, line: Callable[[dict], None], row: dict) -> None:
        with tqdm.external_write_mode(file=sys.stderr):
            line(row)
        self.bar.set_description(f"{self.what} (done: {row_label(row)})", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
