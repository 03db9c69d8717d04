"""Functions run on every rank by the distributed tests (importable by spawned processes)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from distributed import RANK_TIMEOUT_S

from allreduce_bench.core import algorithms
from allreduce_bench.core.config import Sampling
from allreduce_bench.core.measure import patterns
from allreduce_bench.core.measure.collective import Payload, measure
from allreduce_bench.core.measure.device import Device
from allreduce_bench.core.measure.world import end_phase, make_world

DTYPES = (torch.float32, torch.bfloat16, torch.int32)


def counts_for(world_size: int) -> list[int]:
    """1, N-1, N+1, a prime, a few thousand: uneven chunks and fewer elements than ranks."""
    return sorted({1, max(1, world_size - 1), world_size + 1, 97, 3001})


def check_every_world_size(layouts: dict[int, list[int]]) -> list[str]:
    """check_every_algorithm on the sub-world of the first k ranks, for each k in `layouts`
    (one spawned world serves every world size); returns the failures of this rank."""
    failures = []
    for world_size, per_node in sorted(layouts.items()):
        failures += check_every_algorithm(per_node, world_size=world_size)
    return failures


def check_every_algorithm(layouts: list[int], names: list[str] | None = None,
                          world_size: int | None = None) -> list[str]:
    """Exact sums for each algorithm, dtype and awkward count; the hierarchical scheme (the only
    one that uses the node groups) under every layout, the others under the first. Returns
    failures."""
    world_size, failures = world_size or dist.get_world_size(), []
    names = names or algorithms.names_for("gloo")
    for i, ranks_per_node in enumerate(layouts):
        world = make_world(world_size, ranks_per_node, Device(), RANK_TIMEOUT_S)
        if world is None:  # not in this sub-world: wait for it to finish
            end_phase(None, f"check-{world_size}-{ranks_per_node}", Device())
            continue
        for name in names if i == 0 else ["hierarchical"]:
            for dtype in DTYPES:
                for count in counts_for(world_size):
                    tensor = torch.empty(count, dtype=dtype)
                    patterns.fill(tensor, world.rank, world.size)
                    algorithms.get(name)(tensor, world)()
                    expected = patterns.expected_sum(count, world.size, dtype)
                    wrong = patterns.count_wrong(tensor, expected)
                    if wrong:
                        failures.append(f"{name} N={world_size} rpn={ranks_per_node} {dtype} "
                                        f"count={count}: {wrong} wrong on rank {world.rank}")
        end_phase(world, f"check-{world_size}-{ranks_per_node}", Device())
    return failures


def repeated_calls_stay_exact(names: list[str], count: int) -> dict[str, int]:
    """The same built call run three times on refilled input (as the timing loop does): #wrong
    per algorithm."""
    world = make_world(dist.get_world_size(), 2, Device(), RANK_TIMEOUT_S)
    tensor = torch.empty(count)
    wrong = {}
    for name in names:
        call = algorithms.get(name)(tensor, world)
        wrong[name] = 0
        for _ in range(3):
            patterns.fill(tensor, world.rank, world.size)
            call()
            wrong[name] += patterns.count_wrong(
                tensor, patterns.expected_sum(count, world.size, tensor.dtype))
    return wrong


def _forgets_to_add(tensor, world):
    """A broken AllReduce: leaves every rank's input as it is."""
    return lambda: None


def measure_counts_wrong(count: int) -> tuple[int, int, int]:
    """#wrong of a correct and a broken algorithm, and the number of timed iterations."""
    world = make_world(dist.get_world_size(), 1, Device(), RANK_TIMEOUT_S)
    measured, good = measure(algorithms.lookup("ring"), world, Payload(count, torch.float32),
                             Sampling(loops=1, samples=3, warmup=1))
    broken = algorithms.Algorithm("broken", "forgets to add", _forgets_to_add)
    _, bad = measure(broken, world, Payload(count, torch.float32), Sampling(loops=1, samples=2, warmup=0))
    return good, bad, measured.samples


def sub_worlds(sizes: list[int]) -> list[tuple[int, int, int] | None]:
    """(size, nodes, ranks per node) of each sub-world this rank belongs to, after an exact sum."""
    seen = []
    for size in sizes:
        world = make_world(size, 2, Device(), RANK_TIMEOUT_S)
        if world is None:
            seen.append(None)
        else:
            tensor = torch.empty(10)
            patterns.fill(tensor, world.rank, world.size)
            algorithms.get("hierarchical")(tensor, world)()
            assert patterns.count_wrong(tensor, patterns.expected_sum(10, world.size, tensor.dtype)) == 0
            seen.append((world.size, world.nodes, world.ranks_per_node))
        dist.barrier()
    return seen


def check_counts(names: list[str], counts: list[int]) -> list[str]:
    """Exact float32 sums of every named algorithm at each count, on the whole world as 1 node."""
    world, failures = make_world(dist.get_world_size(), dist.get_world_size(), Device(), RANK_TIMEOUT_S), []
    for name in names:
        for count in counts:
            tensor = torch.empty(count)
            patterns.fill(tensor, world.rank, world.size)
            algorithms.get(name)(tensor, world)()
            wrong = patterns.count_wrong(tensor, patterns.expected_sum(count, world.size, tensor.dtype))
            if wrong:
                failures.append(f"{name} count={count}: {wrong} wrong on rank {world.rank}")
    world.close()
    return failures


def rails_in_lockstep(count: int) -> tuple[int, int, int, list[int]]:
    """Two groups side by side ({0,1} and {2,3}), each sampling in lockstep over the world:
    (loops, samples, ranks in its times, the world barriers each rank took)."""
    from allreduce_bench.core.measure import timing

    rank = dist.get_rank()
    device = Device()
    mine = [0, 1] if rank < 2 else [2, 3]
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    group = groups[0] if rank < 2 else groups[1]
    barriers = []
    barrier = device.barrier

    def counted(g):
        barriers.append(g is None or g is dist.group.WORLD)
        return barrier(g)

    device.barrier = counted
    tensor = torch.ones(count)
    # rank 2's calls are slower: without lockstep its group would plan fewer loops
    call = (lambda: (dist.all_reduce(tensor, group=group), [0 for _ in range(20000)])) if rank >= 2 \
        else (lambda: dist.all_reduce(tensor, group=group))
    measured = timing.sample(call, device, group, Sampling(budget_s=0.05, min_sample_s=0.002),
                             timing.Together(lockstep=dist.group.WORLD))
    assert len(mine) == 2
    return measured.loops, measured.samples, len(measured.per_rank_us), [sum(barriers)]


def late_member_of_a_group(timeout_s: float, late_s: float) -> tuple[float, float]:
    """A group made by measure/coordination.Groups whose rank 1 comes `late_s` late to its first
    collective: (the creation timeout, the summed result) on each rank."""
    import time

    from allreduce_bench.health.coordination import Groups

    groups = Groups(timeout_s)
    group = groups.new([0, 1], 0)
    if dist.get_rank() == 1:
        time.sleep(late_s)
    tensor = torch.ones(4)
    dist.all_reduce(tensor, group=group)
    return groups.create.total_seconds(), float(tensor[0])


def skew_amortised(late_s: float) -> list[tuple[int, float, float]]:
    """Rank 1 leaves every alignment `late_s` after the others (a barrier's exit skew made
    large): (loops, skew_share of the samples, seconds per sample) of a small AllReduce
    calibrated with the 1% rule, then without it (min_sample_s alone)."""
    import time

    from allreduce_bench.core import metrics
    from allreduce_bench.core.measure import timing

    device = Device()
    align = device.align

    def late_align(group, spin_s=0.0):
        align(group, spin_s)
        if dist.get_rank() == 1:
            time.sleep(late_s)

    device.align = late_align
    tensor = torch.zeros(256)
    found = []
    for share in (0.01, None):
        sampling = Sampling(budget_s=0.3, min_sample_s=0.002, max_skew_share=share,
                            max_sample_s=0.05, min_samples=3, max_samples=5)
        measured = timing.sample(lambda: dist.all_reduce(tensor), device, None, sampling)
        stats = metrics.sample_stats(measured.per_rank_us, measured.loops)
        found.append((measured.loops, stats["skew_share"],
                      stats["time_us_median"] * measured.loops / 1e6))
    return found


def slow_calibration_calls() -> tuple[int, float]:
    """A call of 100 us whose first three (the warm-up and both calibration calls) take 5 ms,
    as gloo's slow state does on a VM: (loops, the median sample's seconds)."""
    import time

    from allreduce_bench.core.measure import timing

    made = []

    def call() -> None:
        made.append(1)
        timing.busy_wait_call(5e-3 if len(made) <= 3 else 1e-4)()

    sampling = Sampling(budget_s=0.05, min_sample_s=0.002, min_samples=3, max_samples=8)
    started = time.perf_counter()
    measured = timing.sample(call, Device(), None, sampling)
    assert time.perf_counter() - started < 30
    per_sample = sorted(max(times) for times in zip(*measured.per_rank_us))
    return measured.loops, per_sample[len(per_sample) // 2] * measured.loops / 1e6


def link_probe(largest: int):
    """What the CPU link probe gives on this rank (measure/link_peaks.py)."""
    import torch.distributed as dist

    from allreduce_bench.core.measure import link_peaks
    return link_peaks.probe(dist.get_rank(), largest=largest)
