"""One line on a folder of Flight Recorder dumps, lent to the core as `Extensions.dump_verdict`:
the last line of a local run that stopped, and rank 0's failure line under a launcher."""
from __future__ import annotations

from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.hang import dumps as flight_recorder
from allreduce_bench.hang.verdict import culprit_line, ranges, verdict


def verdict_line(where: Path, hosts: list[str] | None = None, world_size: int | None = None) -> str | None:
    """'flight recorder: rank 2 (node1) never_entered all_reduce #7 of group 0: ...' from the
    dumps in `where`, or None when there are none (or they cannot be read)."""
    try:
        dumps = flight_recorder.read([where]) if where.is_dir() else []
    except UsageError as error:
        return f"flight recorder: dumps in {where} unreadable ({error})"
    if not dumps:
        return None
    found = verdict(dumps, hosts or flight_recorder.hosts_beside([where]), world_size)
    if not found.culprits:
        return (f"flight recorder: the {len(dumps)} dumps agree (ranks {ranges(found.dumped)}); "
                f"see `allreduce-bench hang {where}`")
    return ("flight recorder: " + "; ".join(culprit_line(c) for c in found.culprits)
            + f" (`allreduce-bench hang {where}`)")
