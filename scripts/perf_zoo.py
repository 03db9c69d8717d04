#!/usr/bin/env python
"""The algorithm zoo's targets (issue 11), measured here and printed (no pass/fail exit code):

1. N=4 (2 x 2): recursive-doubling >= 1.5x faster than the ring at 4K and 16K;
2. halving-doubling >= 0.9x the ring's busbw at 16M and 64M (N=4);
3. the model's predicted best within 10% of the measured best time at >= 75% of the points of
   `run --algos all --world-sizes 2,4 --min-bytes 4K --max-bytes 16M --factor 4`;
4. model median |error| <= 10% for every algorithm at sizes >= 1M.

    python scripts/perf_zoo.py [--out DIR] [--budget S]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from allreduce_bench.core.results.load import load_results
from allreduce_bench.model.cost import best_table, compare, fit, median_abs_error


def run(out: Path, *args: str) -> None:
    command = [sys.executable, "-m", "allreduce_bench", "run", "--out", str(out), "--no-plot", *args]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def time_us(frame, algorithm, world_size, size):
    row = frame[(frame.algorithm == algorithm) & (frame.world_size == world_size) & (frame.size_bytes == size)]
    return float(row["time_us_median"].median())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the runs here [a temporary directory]")
    parser.add_argument("--budget", default="0.2", help="seconds of samples per algorithm and size")
    options = parser.parse_args()
    root = options.out or Path(tempfile.mkdtemp(prefix="perf_zoo-"))
    sweep, large = root / "all", root / "large"
    run(sweep, "--algos", "all", "--world-sizes", "2,4", "--min-bytes", "4K", "--max-bytes", "16M",
        "--factor", "4", "--budget", options.budget)
    run(large, "--algos", "ring,halving-doubling", "--world-sizes", "4", "--sizes", "16M,64M",
        "--budget", options.budget)
    frame, big = load_results([sweep]), load_results([large])

    print("\n1. recursive-doubling vs ring, N=4 (2 x 2): time(ring) / time(recursive-doubling), target >= 1.5")
    for size in (4 << 10, 16 << 10):
        ratio = time_us(frame, "ring", 4, size) / time_us(frame, "recursive-doubling", 4, size)
        print(f"   {size >> 10}K: {ratio:.2f}x {'met' if ratio >= 1.5 else 'NOT met'}")

    print("\n2. halving-doubling busbw / ring busbw, N=4, target >= 0.9")
    for size in (16 << 20, 64 << 20):
        ratio = time_us(big, "ring", 4, size) / time_us(big, "halving-doubling", 4, size)
        print(f"   {size >> 20}M: {ratio:.2f} {'met' if ratio >= 0.9 else 'NOT met'}")

    model = fit(frame)
    comparison = compare(frame, model)
    best = best_table(comparison)
    share = (best["predicted_best_slower_pct"] <= 10).mean() * 100
    print(f"\n3. predicted best within 10% of the measured best at {share:.0f}% of {len(best)} points "
          f"(target >= 75%): {'met' if share >= 75 else 'NOT met'}")
    print(best[["world_size", "size_bytes", "measured", "predicted", "predicted_best_slower_pct"]]
          .round(1).to_string(index=False))

    errors = median_abs_error(comparison)
    print("\n4. model median |error| (%) at sizes >= 1M, target <= 10 for every algorithm:")
    print(errors.round(1).to_string())
    worst = errors["all"].max()
    print(f"   worst: {worst:.1f}% {'met' if worst <= 10 else 'NOT met'}")
    print(f"\nruns kept in {root}")


if __name__ == "__main__":
    main()
