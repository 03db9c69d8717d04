"""The DDP benchmark's declaration: each rank's measuring (one phase per world size), meta and prepare."""
from __future__ import annotations

import sys
from dataclasses import asdict

from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.context import Benchmark
from allreduce_bench.core.measure.rank import Session
from allreduce_bench.core.measure.world import end_phase, make_world
from allreduce_bench.core.results.store import start_meta_unless_launched
from allreduce_bench.ddp.config import DdpConfig, layer_width, rows_expected
from allreduce_bench.ddp.measurements import measure_world
from allreduce_bench.ddp.timeline_store import append_timeline


def measure_ddp(session: Session) -> int:
    """Every DDP measurement of the run on this rank, one phase per world size."""
    config, env, device = session.config, session.env, session.device

    def show(row: dict) -> None:
        bucket = "" if row["bucket_mb"] != row["bucket_mb"] else f" bucket {row['bucket_mb']:g} MiB"
        accum = f" K={row['accum']}" if row["accum"] > 1 else ""
        print(f"  N={row['world_size']} {row['measure']:<13}{bucket}{accum}: "
              f"{row['time_us_median'] / 1e3:9.1f} ms", file=sys.stderr, flush=True)

    session.show = show
    wrong = 0
    rpn = config.launch.ranks_per_node or env.local_world_size
    for phase, world_size in enumerate(config.launch.world_sizes, start=1):
        session.progress.at(phase, 1, f"ddp, world size {world_size}", tuple(range(env.world_size)))
        session.bind_phase(world_size)
        world = make_world(world_size, rpn, device, config.launch.timeout_s)
        if world is not None:
            wrong += measure_world(config, world, session.record,
                                   lambda rows: append_timeline(config.launch.out_dir, rows)
                                   if session.writer else None)
        end_phase(world, f"ddp-{world_size}", device)
    return wrong


def ddp_meta(config: DdpConfig) -> dict:
    """host_meta plus the model's settings."""
    width = layer_width(config.settings.params, config.settings.layers)
    meta = run_meta.host_meta(config)
    meta["ddp"] = {**asdict(config.settings), "width": width,
                   "params_actual": config.settings.layers * (width * width + width)}
    return meta


def prepare(config: DdpConfig) -> None:
    start_meta_unless_launched(config, ddp_meta)


BENCHMARK = Benchmark("ddp", ddp_meta, measure_ddp, prepare=prepare, rows=rows_expected)
