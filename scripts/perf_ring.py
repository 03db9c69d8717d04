#!/usr/bin/env python
"""The pipelined ring's targets (issue 43), measured here and printed (no pass/fail exit code):

1. ring / native busbw at 16M and 64M, N=2, the median of --runs runs (target >= 0.95), N=4
   reported, the unpipelined ring-steps beside them;
2. AR / (RS + AG) of the ring, N=2 and 4 (target 0.9-1.1), with the in-place halves (the
   AllReduce works in place; analysis/collective_tables.decomposition), the out-of-place
   halves' ratio beside it;
3. with --slices: the ring's time at each slice size and --windows (the choice of
   ring.SLICE_BYTES and ring.WINDOW), N=2, ranks SCHED_FIFO and unbound as `run` has them here.

    python scripts/perf_ring.py [--runs 3] [--budget 1] [--slices 256K,1M,4M [--windows 4,8]] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout measured, installed or not
SIZES = (16 << 20, 64 << 20)


def run(out: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "allreduce_bench", "run", "--out", str(out), "--no-plot",
               "--sizes", "16M,64M", "--world-sizes", "2,4", *args]
    print(f"$ {' '.join(command[3:])}   (load {' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)


def times(out: Path):
    """(collective, algorithm, world size, size) -> median us of one run."""
    from allreduce_bench.core.results.load import load_results

    frame = load_results([out])
    return {(r.collective, r.algorithm, r.world_size, r.size_bytes): r.time_us_median
            for r in frame.itertuples()}


def slice_rank(slices: list[tuple[int, int]], size_bytes: int, budget_s: float) -> dict[tuple[int, int], float]:
    """Rank side of --slices: the ring's median time (us) at each (slice size, window), and
    native's under (0, 0)."""
    import torch
    import torch.distributed as dist

    from allreduce_bench.core import algorithms, metrics
    from allreduce_bench.core.algorithms import ring
    from allreduce_bench.core.config import Sampling
    from allreduce_bench.core.measure import scheduling
    from allreduce_bench.core.measure.collective import measure
    from allreduce_bench.core.measure.device import Device
    from allreduce_bench.core.measure.world import make_world

    scheduling.apply("auto", "cpu")  # SCHED_FIFO, as `run`'s ranks (before gloo's threads start)
    dist.init_process_group("gloo")
    world, out = make_world(2, 1, Device(), 120.0), {}
    for _ in range(2):  # twice, interleaved: the second pass is the one kept
        for size, window in [(0, 0), *slices]:
            algorithm = algorithms.lookup("native") if not size else replace(
                algorithms.lookup("ring"), build=partial(ring.build, slice_bytes=size, window=window))
            measured, wrong = measure(algorithm, world, size_bytes // 4, torch.float32,
                                      Sampling(budget_s=budget_s))
            assert wrong == 0
            out[size, window] = metrics.sample_stats(measured.per_rank_us)["time_us_median"]
    dist.destroy_process_group()
    return out


def main() -> None:
    from allreduce_bench.core import units

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", default="1", help="seconds of samples per algorithm and size")
    parser.add_argument("--slices", help="slice sizes to time the ring at (N=2, 64M), e.g. 256K,1M,4M")
    parser.add_argument("--windows", default="8", help="with --slices: receives posted ahead, e.g. 4,8,16")
    parser.add_argument("--out", type=Path, help="keep the runs here [a temporary directory]")
    options = parser.parse_args()
    root = options.out or Path(tempfile.mkdtemp(prefix="perf_ring-"))
    if options.slices:
        from allreduce_bench.core.launch.local import launch_local

        slices = [(units.parse_size(s), int(w)) for s in options.slices.split(",")
                  for w in options.windows.split(",")]
        print(f"3. ring at N=2, 64M by slice size and window (load {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        for (size, window), us in launch_local(2, slice_rank, slices, 64 << 20, float(options.budget))[0].items():
            print(f"   {f'{units.format_size(size)} x {window}' if size else 'native':>10}: {us / 1e3:.1f} ms")
        return
    runs = []
    for i in range(options.runs):
        run(root / f"ar{i}", "--algos", "native,ring,ring-steps", "--budget", options.budget)
        runs.append(times(root / f"ar{i}"))
    print("\n1. busbw / native's (= time(native) / time(algorithm)), median of "
          f"{options.runs} runs; target for ring at N=2 >= 0.95")
    for n in (2, 4):
        for size in SIZES:
            line = [f"   N={n} {size >> 20}M:"]
            for name in ("ring", "ring-steps"):
                ratio = statistics.median(t[("all_reduce", "native", n, size)] / t[("all_reduce", name, n, size)]
                                          for t in runs)
                line.append(f"{name} {ratio:.2f}" + (" (met)" if n == 2 and name == "ring" and ratio >= 0.95
                                                      else " (NOT met)" if n == 2 and name == "ring" else ""))
            print("  ".join(line))
    run(root / "parts", "--algos", "ring", "--collectives", "all_reduce,reduce_scatter,all_gather",
        "--in-place", "--budget", options.budget)
    from allreduce_bench.core.analysis.collective_tables import decomposition
    from allreduce_bench.core.results.load import load_results

    print("\n2. ring AR / (RS + AG), in-place halves, target 0.9-1.1")
    for row in decomposition(load_results([root / "parts"])).itertuples():
        print(f"   N={row.world_size} {row.size_bytes >> 20}M: {row.ratio:.2f} "
              f"{'met' if 0.9 <= row.ratio <= 1.1 else 'NOT met'} ({row.all_reduce / 1e3:.1f} ms vs "
              f"{row.reduce_scatter / 1e3:.1f} + {row.all_gather / 1e3:.1f}; out-of-place halves "
              f"{row.ratio_out_of_place:.2f})")
    print(f"\nruns kept in {root}")


if __name__ == "__main__":
    main()
