"""What hang lends the core: the line naming the rank that hung, from Flight Recorder dumps."""
from __future__ import annotations

from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import hookimpl


@hookimpl
def dump_verdict(folder: Path, world_size: int | None) -> str | None:
    """'flight recorder: rank 2 (node1) never_entered all_reduce #7 of group 0: ...', or None."""
    from allreduce_bench.hang import dumps as flight_recorder
    from allreduce_bench.hang.verdict import culprit_line, ranges, verdict

    try:
        dumps = flight_recorder.read([folder]) if folder.is_dir() else []
    except UsageError as error:
        return f"flight recorder: dumps in {folder} unreadable ({error})"
    if not dumps:
        return None
    found = verdict(dumps, flight_recorder.hosts_beside([folder]), world_size)
    if not found.culprits:
        return (f"flight recorder: the {len(dumps)} dumps agree (ranks {ranges(found.dumped)}); "
                f"see `allreduce-bench hang {folder}`")
    return ("flight recorder: " + "; ".join(culprit_line(c) for c in found.culprits)
            + f" (`allreduce-bench hang {folder}`)")
