"""health.json's unreachable hosts named with the collective their rank hung on, from the
Flight Recorder's dumps (`--flight-recorder`; the hang feature reads them)."""
from __future__ import annotations

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.measure.flight_recorder import folder
from allreduce_bench.core.results.store import read_meta
from allreduce_bench.hang import dumps as reader
from allreduce_bench.hang.verdict import annotate_unreachable, verdict
from allreduce_bench.health.config import HealthConfig
from allreduce_bench.health.pairing import host_names


def name_collectives(doc: dict, config: HealthConfig) -> dict:
    if not config.launch.flight_recorder:
        return doc
    try:
        dumps = reader.read([folder(config.launch)])
    except UsageError:
        return doc  # no dumps (the check never started), said by health itself
    per_host = config.launch.ranks_per_node or 1
    names = host_names(read_meta(config.launch.out_dir).get("hostnames", []), per_host)
    return annotate_unreachable(doc, verdict(dumps, names, world_size=len(names) or None))
