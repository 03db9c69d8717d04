"""One results row, of every benchmark: a measurement of any collective, a DDP step."""
from __future__ import annotations

import datetime as _dt
import math

import numpy as np
import pandas as pd

from allreduce_bench.core import metrics
from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import rounds, timing
from allreduce_bench.core.measure.world import World
from allreduce_bench.core.results.schema import samples_frame


def result_row(config, world: World, stats: dict, *, benchmark: str, collective: str,
               algorithm: str, dtype: str, size_bytes: int, count: int, timing: str, samples: int,
               loops: int, warmup: int, wrong: int, bandwidth_of: str | None, **own) -> dict:
    """The one builder of a results row: `stats` as metrics.sample_stats makes them, algbw and
    busbw as `bandwidth_of`'s (None: the time is no collective's, both NaN), `own` the
    benchmark's own columns. `config`: any measuring command's (its launch fields)."""
    median = stats["time_us_median"]
    return {
        "run_id": config.run_id,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tag": config.tag, "benchmark": benchmark, "collective": collective,
        "algorithm": algorithm, "backend": config.backend, "device": world.device.kind,
        "dtype": dtype, "world_size": world.size, "nodes": world.nodes,
        "ranks_per_node": world.ranks_per_node, "size_bytes": size_bytes, "count": count,
        "timing": timing, "samples": samples, "loops": loops, "warmup": warmup, **stats,
        "algbw_GBps": math.nan if bandwidth_of is None else metrics.algbw_GBps(size_bytes, median),
        "busbw_GBps": math.nan if bandwidth_of is None else
        metrics.busbw_GBps(size_bytes, median, world.size, bandwidth_of),
        "wrong": wrong, "emulation": config.emulation, **own}


def make_row(config: RunConfig, world: World, algorithm: str, count: int,
             measured: timing.Measured, wrong: int, ranks=None, collective: str = "all_reduce",
             size_bytes: int | None = None, in_place: bool = False) -> dict:
    """The row of one measurement of a collective. `ranks`: the global rank of each of
    measured.per_rank_us's rows (default: the world's members in group-rank order).
    `size_bytes`: the whole buffer, as nccl-tests prints it (default: the AllReduce's count
    elements). `in_place`: the in-place half of a collective measured in both (benchmark
    <collective>-in-place)."""
    stats = metrics.sample_stats(measured.per_rank_us, measured.loops)
    stats["late_rank"] = list(ranks or world.group.ranks)[stats["late_rank"]]
    return result_row(config, world, stats, benchmark=metrics.benchmark_of(collective, in_place),
                      collective=collective, algorithm=algorithm, dtype=config.dtype,
                      size_bytes=count * config.itemsize if size_bytes is None else size_bytes,
                      count=count, timing=config.timing, samples=measured.samples,
                      loops=measured.loops, warmup=config.sampling.warmup, wrong=wrong,
                      bandwidth_of=collective)


def pooled_row(config: RunConfig, world: World, algorithm: str, count: int,
               per_round: list[timing.Measured], wrong: int, hosts, **row_fields) -> tuple[dict, pd.DataFrame]:
    """One row from all rounds of a measurement (statistics over the pooled samples, and how
    much the rounds' medians differ) and its raw samples with their `round`. `row_fields`:
    make_row's collective, size_bytes and in_place."""
    times = [m.per_rank_us for m in per_round]
    pooled = timing.Measured(rounds.pooled(times), per_round[0].loops,
                             sum(m.samples for m in per_round))
    row = make_row(config, world, algorithm, count, pooled, wrong, **row_fields)
    agreement = rounds.round_columns(times)
    row.update(rounds=agreement["rounds"], round_spread=agreement["round_spread"],
               round_p=agreement["round_p"],
               unstable=row["unstable"] or agreement["rounds_disagree"])
    # one frame of the pooled samples (numbered on across rounds), each tagged with its round:
    # a frame per round and a concat cost ~20 ms a row
    samples = samples_frame(row, pooled.per_rank_us, world.group.ranks, hosts)
    of_round = np.repeat(np.arange(len(per_round)), [m.samples for m in per_round])
    samples["round"] = np.tile(of_round, len(pooled.per_rank_us))
    return row, samples
