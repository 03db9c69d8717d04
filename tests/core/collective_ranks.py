"""Functions run on every rank by the collective tests (importable by spawned processes)."""
from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from distributed import RANK_TIMEOUT_S

from allreduce_bench.core import algorithms
from allreduce_bench.core.config import Sampling
from allreduce_bench.core.measure import collective
from allreduce_bench.core.measure.device import Device
from allreduce_bench.core.measure.world import end_phase, make_world
from allreduce_bench.core.metrics import COLLECTIVES

DTYPES = (torch.float32, torch.bfloat16, torch.int32)
OTHERS = [c for c in COLLECTIVES if c != "all_reduce"]


def counts_for(world_size: int) -> list[int]:
    """1, N-1, N+1, a prime, a few thousand: uneven chunks and fewer elements than ranks."""
    return sorted({1, max(1, world_size - 1), world_size + 1, 97, 3001})


def exact_on(world_size: int, collectives: list[str], counts: list[int], dtypes) -> list[str]:
    """Every algorithm of each collective, in every mode, on the sub-world of the first
    `world_size` ranks (one node): the failures of this rank. Ranks outside wait."""
    world, failures = make_world(world_size, world_size, Device(), RANK_TIMEOUT_S), []
    if world is not None:
        for name_of in collectives:
            for algorithm in algorithms.registry(name_of).values():
                failures += _exact(algorithm, world, counts, dtypes)
    end_phase(world, f"collectives-{world_size}-{len(counts)}", Device())
    return failures


def _exact(algorithm, world, counts, dtypes) -> list[str]:
    failures = []
    for in_place in collective.MODES[algorithm.collective]:
        for dtype in dtypes:
            for count in counts:
                send, recv = collective.buffers(algorithm.collective, count, world, dtype, in_place)
                call = algorithm.build(send, recv, world)
                for attempt in range(2):  # the same built call twice: plans are reusable
                    wrong = collective.count_wrong(algorithm.collective, call, send, recv, count, world)
                    if wrong:
                        failures.append(f"{algorithm.collective}/{algorithm.name} N={world.size} "
                                        f"in_place={in_place} {dtype} count={count} call {attempt}: "
                                        f"{wrong} wrong on rank {world.rank}")
    return failures


def exact_every_world_size(sizes: list[int], collectives: list[str] = OTHERS) -> list[str]:
    failures = []
    for world_size in sizes:
        failures += exact_on(world_size, collectives, counts_for(world_size), DTYPES)
    return failures


def exact_at_counts(world_size: int, counts: list[int]) -> list[str]:
    return exact_on(world_size, OTHERS, counts, (torch.float32,))


def measured_wrong(world_size: int) -> dict[str, int]:
    """#wrong of a quick measurement of every algorithm of every collective (and of a broken
    AllGather that leaves the output alone), summed over ranks."""
    world, wrong = make_world(world_size, world_size, Device(), RANK_TIMEOUT_S), {}
    broken = algorithms.Algorithm("broken", "writes nothing", lambda s, r, w: (lambda: None),
                                  collective="all_gather")
    if world is not None:
        for name_of in OTHERS:
            for name, algorithm in [*algorithms.registry(name_of).items(), ("broken", broken)][
                    :None if name_of == "all_gather" else -1]:
                _, wrong[f"{name_of}/{name}"] = collective.measure(
                    algorithm, world, collective.Payload(40, torch.float32), Sampling(loops=1, samples=2, warmup=1))
    end_phase(world, "measured", Device())
    dist.barrier()
    return wrong


def pipelined_ring_exact(world_sizes: list[int], cases: list[tuple[int, list[int]]]) -> list[str]:
    """pipelined_ring_on for each world size in turn."""
    return [f for world_size in world_sizes for f in pipelined_ring_on(world_size, cases)]


def pipelined_ring_on(world_size: int, cases: list[tuple[int, list[int]]]) -> list[str]:
    """The pipelined ring's AllReduce (flat, and inside nodes of 2 ranks: hierarchical), its
    ReduceScatter and its AllGather in both modes, for each (slice bytes, counts) of `cases`
    (slices of a few elements, of one, more slices than elements), every dtype, each built call
    run twice: the failures of this rank on the sub-world of the first `world_size` ranks."""
    from functools import partial

    from allreduce_bench.core.algorithms import hierarchical, ring
    from allreduce_bench.core.measure import patterns

    world, failures = make_world(world_size, 2 if world_size % 2 == 0 else world_size, Device(),
                                 RANK_TIMEOUT_S), []
    for slice_bytes, counts in cases if world is not None else []:
        for dtype in DTYPES:
            for count in sorted({max(1, c + world_size) for c in counts}):
                tensor = torch.empty(count, dtype=dtype)
                for name, build in (("ring", ring.build), ("hierarchical", hierarchical.build)):
                    call = build(tensor, world, slice_bytes)
                    for attempt in range(2):
                        patterns.fill(tensor, world.rank, world.size)
                        call()
                        wrong = patterns.count_wrong(tensor, patterns.expected_sum(count, world.size, dtype))
                        if wrong:
                            failures.append(f"{name} N={world_size} slice={slice_bytes} {dtype} "
                                            f"count={count} call {attempt}: {wrong} wrong on rank {world.rank}")
                for build, name_of in ((ring.build_reduce_scatter, "reduce_scatter"),
                                       (ring.build_all_gather, "all_gather")):
                    algorithm = dataclasses.replace(algorithms.lookup("ring", name_of),
                                                    build=partial(build, slice_bytes=slice_bytes))
                    failures += [f"slice={slice_bytes} {f}" for f in _exact(algorithm, world, [count], [dtype])]
    end_phase(world, f"pipelined-{world_size}", Device())
    return failures
