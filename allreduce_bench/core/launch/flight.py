"""The Flight Recorder's verdict on a local run that stopped: with --flight-recorder, every
surviving rank dumped before it left; once all have ended the driver reads the dumps and names
the rank that hung and the collective (measure/flight_recorder.py, analysis/hang.py)."""
from __future__ import annotations


def flight_recorder_line(config) -> str | None:
    """'allreduce-bench: flight recorder: rank 2 ... no_dump all_reduce #7 of group 0: ...', or
    None without --flight-recorder or dumps."""
    if not getattr(config, "flight_recorder", False):
        return None
    from allreduce_bench.core.measure.flight_recorder import folder, verdict_line

    line = verdict_line(folder(config), world_size=max(config.world_sizes))
    return f"allreduce-bench: {line}" if line else None
