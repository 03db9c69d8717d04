#!/usr/bin/env python
"""Performance figures of the benchmark core, printed side by side (not a test).

1. ring busbw / native busbw at 16M and 64M, world sizes 2 and 4 (target >= 0.9);
2. the harness's native busbw / a minimal loop's (barrier, n back-to-back all_reduce, one clock
   around them) at sizes >= 1M (target: within 5%);
3. the wall time of the default `allreduce-bench run` (target < 60 s).

Usage: python scripts/perf_core.py [--out DIR] [--loop-iters N]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time

import pandas as pd
import torch
import torch.distributed as dist

from allreduce_bench.launch import launch_local
from allreduce_bench.metrics import busbw_GBps

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20]


def minimal_loop(sizes: list[int], iters: int) -> dict[int, float]:
    """Per size: us per all_reduce from one clock around `iters` back-to-back calls."""
    dist.init_process_group("gloo")
    out = {}
    for size in sizes:
        tensor = torch.zeros(size // 4)  # zeros stay zeros: no refill needed between calls
        for _ in range(2):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        elapsed = time.perf_counter() - start
        slowest = torch.tensor([elapsed])
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out[size] = slowest.item() / iters * 1e6
    dist.destroy_process_group()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="keep the default run's results here (default: a temp dir)")
    parser.add_argument("--loop-iters", type=int, default=10)
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="perf-core-")
    command = [shutil.which("allreduce-bench") or "allreduce-bench", "run", "--out", out, "--no-plot"]
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - start
    if done.returncode:
        print(f"the default run failed with exit code {done.returncode}", file=sys.stderr)
        return 1
    frame = pd.read_csv(f"{out}/results.csv")
    times = frame.pivot_table(index=["world_size", "size_bytes"], columns="algorithm",
                              values="time_us_median")

    print("1. ring busbw / native busbw (target >= 0.9)")
    print(f"{'N':>3} {'size':>6} {'native GB/s':>12} {'ring GB/s':>10} {'ratio':>6}")
    for world_size in (2, 4):
        for size in (16 << 20, 64 << 20):
            native, ring = times.loc[(world_size, size), ["native", "ring"]]
            print(f"{world_size:>3} {size >> 20:>5}M {busbw_GBps(size, native, world_size):>12.3f} "
                  f"{busbw_GBps(size, ring, world_size):>10.3f} {native / ring:>6.2f}")

    print(f"\n2. harness native busbw / minimal loop busbw (target within 5%; loop of {args.loop_iters})")
    print(f"{'N':>3} {'size':>6} {'harness GB/s':>13} {'loop GB/s':>10} {'ratio':>6}")
    for world_size in (2, 4):
        loop = launch_local(world_size, minimal_loop, SIZES, args.loop_iters)[0]
        for size in SIZES:
            harness = times.loc[(world_size, size), "native"]
            print(f"{world_size:>3} {size >> 20:>5}M {busbw_GBps(size, harness, world_size):>13.3f} "
                  f"{busbw_GBps(size, loop[size], world_size):>10.3f} {loop[size] / harness:>6.2f}")

    print(f"\n3. wall time of the default run: {wall_s:.1f} s (target < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
