"""Functions run on every rank by the collective tests (importable by spawned processes)."""
from __future__ import annotations

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
                    algorithm, world, 40, torch.float32, Sampling(loops=1, samples=2, warmup=1))
    end_phase(world, "measured", Device())
    dist.barrier()
    return wrong
