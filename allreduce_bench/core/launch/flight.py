"""The Flight Recorder's verdict on a local run that stopped: with --flight-recorder, every
surviving rank dumped before it left; once all have ended the driver has the hang feature's
`dump_verdict` (handed in through Extensions) name the rank that hung and the collective."""
from __future__ import annotations


def flight_recorder_line(config, dump_verdict) -> str | None:
    """'allreduce-bench: flight recorder: rank 2 ... no_dump all_reduce #7 of group 0: ...', or
    None without --flight-recorder, a verdict to ask, or dumps."""
    if not getattr(config, "flight_recorder", False) or dump_verdict is None:
        return None
    from allreduce_bench.core.measure.flight_recorder import folder

    line = dump_verdict(folder(config), world_size=max(config.world_sizes))
    return f"allreduce-bench: {line}" if line else None
