"""The sweep on one (sub-)world: for each algorithm and size, fill, warm up, time, check.

Timing (the same for every algorithm): each iteration first restores the input from a pristine
copy (so values never grow or overflow), then all ranks meet at a barrier, then the clock runs
around the algorithm's call alone. Per iteration the slowest rank's time is kept (an AllReduce
is finished only when the last rank has its result), and median, mean, p95, min and max are
taken over those. The input is a pattern of known exact sum; afterwards it is restored and
reduced once more, untimed, and every element is compared: mismatches summed over ranks are
`wrong`.
"""
from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable

import torch
import torch.distributed as dist

from . import algorithms, metrics, patterns
from .config import RunConfig
from .world import World


def slowest_per_iteration(times_us: list[float], group, device) -> list[float]:
    """Per iteration, the slowest rank's time: a collective is done when its last rank is."""
    times = torch.tensor(times_us, dtype=torch.float64, device=device.torch_device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=group)
    return times.cpu().tolist()


def measure(build: algorithms.Builder, world: World, count: int, dtype: torch.dtype,
            iters: int, warmup: int) -> tuple[list[float], int]:
    """(per-iteration time of the slowest rank in us, #wrong summed over ranks)."""
    device = world.device
    pristine = torch.empty(count, dtype=dtype, device=device.torch_device)
    patterns.fill(pristine, world.rank, world.size)
    tensor = torch.empty_like(pristine)
    call = build(tensor, world)
    for _ in range(warmup):
        tensor.copy_(pristine)
        call()
    timer = device.timer(iters)
    for i in range(iters):
        tensor.copy_(pristine)
        device.barrier(world.group.pg)
        timer.start(i)
        call()
        timer.stop(i)
    times = slowest_per_iteration(timer.times_us(), world.group.pg, device)

    # The check runs the very call that was timed (no second plan: naive's root would hold
    # twice (N-1) x S of buffers) on the pattern again, so reusing a plan is checked too.
    tensor.copy_(pristine)
    call()
    expected = patterns.expected_sum(count, world.size, dtype, device.torch_device)
    wrong = torch.tensor([patterns.count_wrong(tensor, expected)], dtype=torch.int64,
                         device=device.torch_device)
    dist.all_reduce(wrong, group=world.group.pg)
    return times, int(wrong.item())


def make_row(config: RunConfig, world: World, algorithm: str, count: int,
             times_us: list[float], wrong: int) -> dict:
    size_bytes = count * config.torch_dtype.itemsize
    stats = metrics.time_stats(times_us)
    median = stats["time_us_median"]
    return {
        "run_id": config.run_id,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tag": config.tag, "benchmark": "allreduce", "algorithm": algorithm,
        "backend": config.backend, "device": world.device.kind, "dtype": config.dtype,
        "world_size": world.size, "nodes": world.nodes, "ranks_per_node": world.ranks_per_node,
        "size_bytes": size_bytes, "count": count, "iters": config.iters, "warmup": config.warmup,
        **stats,
        "algbw_GBps": metrics.algbw_GBps(size_bytes, median),
        "busbw_GBps": metrics.busbw_GBps(size_bytes, median, world.size),
        "wrong": wrong,
        # set by `emulate` in every rank's environment; empty on real hardware
        "emulation": os.environ.get("ALLREDUCE_BENCH_EMULATION", ""),
    }


def sweep(config: RunConfig, world: World, on_row: Callable[[dict], None],
          on_algorithm: Callable[[str, World], None] = lambda a, w: None,
          before: Callable[[str, int], bool] = lambda algorithm, size_bytes: True) -> int:
    """Measure every algorithm at every size; `on_row` gets each row (only rank 0's matter).

    `before(algorithm, size_bytes)` runs ahead of each measurement, outside any timing; it
    returns False to skip one (a resumed run's finished rows; the same answer on every rank).
    """
    wrong_total = 0
    itemsize = config.torch_dtype.itemsize
    for name in config.algorithms:
        build = algorithms.get(name)
        on_algorithm(name, world)
        for size in config.sizes:
            count = size // itemsize  # sizes are whole elements (options.run_config)
            if not before(name, count * itemsize):
                continue
            times, wrong = measure(build, world, count, config.torch_dtype, config.iters,
                                   config.warmup)
            wrong_total += wrong
            on_row(make_row(config, world, name, count, times, wrong))
    return wrong_total
