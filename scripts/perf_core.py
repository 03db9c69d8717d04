#!/usr/bin/env python
"""Performance figures of the benchmark core, printed side by side (not a test).

1. ring busbw / native busbw at 16M and 64M, world sizes 2 and 4 (target >= 0.9);
2. the harness's native busbw / a minimal loop's (barrier, n back-to-back all_reduce, one clock
   around them) at sizes >= 1M (target: within 5%);
3. the wall time of the default `allreduce-bench run` (target < 60 s).

For 1 and 2 each world runs the harness's own `bench.measure` and the comparison alternately,
--rounds times, in the same processes, and the median over rounds is printed: on a small shared
machine, runs minutes apart differ by more than the effects being compared.

Usage: python scripts/perf_core.py [--rounds R] [--iters N] [--skip-default-run]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from allreduce_bench import algorithms
from allreduce_bench.benchmarks.allreduce import measure
from allreduce_bench.launch.environments import launch_local
from allreduce_bench.measure.device import Device
from allreduce_bench.measure.world import make_world
from allreduce_bench.metrics import busbw_GBps

RING_SIZES = [16 << 20, 64 << 20]
LOOP_SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20]


def harness_median_us(name: str, world, size: int, iters: int) -> float:
    times, wrong = measure(algorithms.get(name), world, size // 4, torch.float32, iters, warmup=2)
    assert wrong == 0
    return statistics.median(times)


def minimal_loop_us(world, size: int, iters: int) -> float:
    """us per all_reduce: barrier, `iters` back-to-back calls, one clock, slowest rank."""
    tensor = torch.zeros(size // 4)  # zeros stay zeros: nothing to refill between calls
    for _ in range(2):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    slowest = torch.tensor([time.perf_counter() - start])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item() / iters * 1e6


def compare(rounds: int, iters: int) -> dict:
    """On every rank of a local world: medians over rounds of each timing."""
    dist.init_process_group("gloo")
    world = make_world(dist.get_world_size(), dist.get_world_size(), Device())
    samples: dict[tuple, list[float]] = {}
    for _ in range(rounds):
        for size in RING_SIZES:
            for name in ("native", "ring"):
                samples.setdefault((name, size), []).append(harness_median_us(name, world, size, iters))
        for size in LOOP_SIZES:
            samples.setdefault(("harness", size), []).append(harness_median_us("native", world, size, iters))
            samples.setdefault(("loop", size), []).append(minimal_loop_us(world, size, iters))
    dist.destroy_process_group()
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--skip-default-run", action="store_true")
    args = parser.parse_args()

    results = {n: launch_local(n, compare, args.rounds, args.iters)[0] for n in (2, 4)}
    print(f"1. ring busbw / native busbw (target >= 0.9; median of {args.rounds} rounds of "
          f"{args.iters} iterations)")
    print(f"{'N':>3} {'size':>6} {'native GB/s':>12} {'ring GB/s':>10} {'ratio':>6}")
    for n, times in results.items():
        for size in RING_SIZES:
            native, ring = times[("native", size)], times[("ring", size)]
            print(f"{n:>3} {size >> 20:>5}M {busbw_GBps(size, native, n):>12.3f} "
                  f"{busbw_GBps(size, ring, n):>10.3f} {native / ring:>6.2f}")

    print("\n2. harness native busbw / minimal loop busbw (target within 5%)")
    print(f"{'N':>3} {'size':>6} {'harness GB/s':>13} {'loop GB/s':>10} {'ratio':>6}")
    for n, times in results.items():
        for size in LOOP_SIZES:
            harness, loop = times[("harness", size)], times[("loop", size)]
            print(f"{n:>3} {size >> 20:>5}M {busbw_GBps(size, harness, n):>13.3f} "
                  f"{busbw_GBps(size, loop, n):>10.3f} {loop / harness:>6.2f}")

    if not args.skip_default_run:
        out = tempfile.mkdtemp(prefix="perf-core-")
        start = time.perf_counter()
        done = subprocess.run([shutil.which("allreduce-bench") or "allreduce-bench", "run",
                               "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall_s = time.perf_counter() - start
        status = "" if done.returncode == 0 else f" (exit code {done.returncode})"
        print(f"\n3. wall time of the default run: {wall_s:.1f} s{status} (target < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
