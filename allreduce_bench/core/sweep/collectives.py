"""The sweep of every collective other than AllReduce (`run --collectives`), at nccl-tests' counts
(metrics.collective_counts), so rows line up with an imported nccl-tests log."""
from __future__ import annotations

from dataclasses import dataclass

from allreduce_bench.core import algorithms, metrics
from allreduce_bench.core.algorithms import Algorithm
from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import collective as measuring
from allreduce_bench.core.measure.device import torch_dtype
from allreduce_bench.core.measure.world import World
from allreduce_bench.core.sweep import passes
from allreduce_bench.core.sweep.rows import Point, pooled_row


def label(collective: str, name: str, in_place: bool = False) -> str:
    """How progress, the console and resume name a measurement: `<benchmark>/<algorithm>` (bare for AllReduce)."""
    if collective == "all_reduce":
        return name
    return f"{metrics.benchmark_of(collective, in_place)}/{name}"


def measurement_keys(config: RunConfig, world_size: int) -> list[tuple[str, int, int]]:
    """(label, world size, size_bytes) of every measurement at this world size, as resume keys them."""
    keys = [(a, world_size, s // config.itemsize * config.itemsize)
            for a in config.algorithms for s in config.sizes]
    for collective, names in config.collectives:
        for size in config.sizes:
            count, size_bytes = metrics.collective_counts(collective, size, config.itemsize, world_size)
            keys += [(label(collective, a, half), world_size, size_bytes)
                     for a in names for half in config.halves(collective)] if count else []
    return keys


def sweep(config: RunConfig, world: World, collective: str, names: tuple[str, ...],
          phase: passes.Phase, hosts: list[str]) -> int:
    """Each named algorithm of `collective` at every size and half, in interleaved passes; #wrong summed."""
    items = []  # in the order rows come
    for name in names:
        algorithm = algorithms.lookup(name, collective)
        for in_place_half in config.halves(collective):  # the first half, then --in-place's
            for size in config.sizes:
                count, size_bytes = metrics.collective_counts(collective, size, config.itemsize,
                                                              world.size)
                if count:
                    items.append(collective_item(config, world, Measurement(
                        collective, name, algorithm, in_place_half, count, size_bytes), hosts))
    return passes.run(config, world, items, phase)


@dataclass(frozen=True)
class Measurement:

    collective: str
    name: str
    algorithm: Algorithm
    in_place_half: bool
    count: int
    size_bytes: int


def collective_item(config: RunConfig, world: World, m: Measurement, hosts: list[str]) -> passes.Item:
    # the first half out of place where the collective has it, the second in place
    in_place = m.in_place_half or measuring.MODES[m.collective][0]

    def measure_once(sampling, check: bool):
        return measuring.measure(m.algorithm, world,
                                 measuring.Payload(m.count, torch_dtype(config.dtype), in_place), sampling, check)

    def row(taken, wrong: int):
        made, samples = pooled_row(config, world, Point(m.name, m.count, m.collective,
                                                        m.size_bytes, m.in_place_half),
                                   taken, wrong, hosts)
        ran = m.algorithm.ran_as(config.launch.backend)
        made["runs_as"] = "" if ran == m.collective else ran
        return made, samples

    return passes.Item(label(m.collective, m.name, m.in_place_half), m.size_bytes, measure_once, row)
