"""One results row, of every benchmark: a measurement of any collective, a DDP step."""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from allreduce_bench.core import metrics
from allreduce_bench.core.config import RunConfig, Sampling
from allreduce_bench.core.config.launch import LaunchConfig
from allreduce_bench.core.measure import rounds, timing
from allreduce_bench.core.measure.world import World
from allreduce_bench.core.results.schema import samples_frame


class Sampled(Protocol):
    """A config whose rows are sampled collectives."""

    @property
    def launch(self) -> LaunchConfig: ...

    @property
    def dtype(self) -> str: ...

    @property
    def itemsize(self) -> int: ...

    @property
    def sampling(self) -> Sampling: ...


@dataclass(frozen=True)
class Point:
    """One measurement: an algorithm of a collective at `count` elements (`size_bytes`: the whole buffer)."""

    algorithm: str
    count: int
    collective: str = "all_reduce"
    size_bytes: int | None = None
    in_place: bool = False


def result_row(launch: LaunchConfig, world: World, stats: dict, columns: dict,
               bandwidth_of: str | None) -> dict:
    """The one builder of a results row; algbw and busbw as `bandwidth_of`'s (None: both NaN)."""
    median, size_bytes = stats["time_us_median"], columns["size_bytes"]
    return {
        "run_id": launch.run_id,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tag": launch.tag, "backend": launch.backend, "device": world.device.kind,
        "world_size": world.size, "nodes": world.nodes, "ranks_per_node": world.ranks_per_node,
        **columns, **stats,
        "algbw_GBps": math.nan if bandwidth_of is None else metrics.algbw_GBps(size_bytes, median),
        "busbw_GBps": math.nan if bandwidth_of is None else
        metrics.busbw_GBps(size_bytes, median, world.size, bandwidth_of),
        "emulation": launch.emulation}


def make_row(config: Sampled, world: World, point: Point, measured: timing.Measured, wrong: int,
             ranks=None) -> dict:
    """The row of one measurement; `ranks`: the global rank of each of per_rank_us's rows."""
    stats = metrics.sample_stats(measured.per_rank_us, measured.loops)
    stats["late_rank"] = list(ranks or world.group.ranks)[stats["late_rank"]]
    size_bytes = point.count * config.itemsize if point.size_bytes is None else point.size_bytes
    return result_row(config.launch, world, stats, {
        "benchmark": metrics.benchmark_of(point.collective, point.in_place),
        "collective": point.collective, "algorithm": point.algorithm, "dtype": config.dtype,
        "size_bytes": size_bytes, "count": point.count, "timing": "samples",
        "samples": measured.samples, "loops": measured.loops, "warmup": config.sampling.warmup,
        "wrong": wrong}, point.collective)


def pooled_row(config: RunConfig, world: World, point: Point, per_round: list[timing.Measured],
               wrong: int, hosts: list[str]) -> tuple[dict, pd.DataFrame]:
    """One row from all rounds of a measurement, and its raw samples with their `round`."""
    times = [m.per_rank_us for m in per_round]
    pooled = timing.Measured(rounds.pooled(times), per_round[0].loops,
                             sum(m.samples for m in per_round))
    row = make_row(config, world, point, pooled, wrong)
    agreement = rounds.round_columns(times)
    row.update(rounds=agreement["rounds"], round_spread=agreement["round_spread"],
               round_p=agreement["round_p"],
               unstable=row["unstable"] or agreement["rounds_disagree"])
    # one frame tagged by round: a frame per round and a concat cost ~20 ms a row
    samples = samples_frame(row, pooled.per_rank_us, world.group.ranks, hosts)
    of_round = np.repeat(np.arange(len(per_round)), [m.samples for m in per_round])
    samples["round"] = np.tile(of_round, len(pooled.per_rank_us))
    return row, samples
