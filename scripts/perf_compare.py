#!/usr/bin/env python
"""The targets of `allreduce-bench compare`, measured with real runs (not a test).

Runs `allreduce-bench run` three times on this machine: ring, 4 ranks, ten sizes 4K-32M,
float32 twice (one configuration) and bfloat16 once, then compares

1. float32 run 2 against run 1: target at most 1 size in 10 called significant;
2. bfloat16 against float32: target 16M called significant.

Significance needs the runs' raw samples (<run>/samples.parquet/). Where the runs have none
(a version of the measuring core that does not keep them yet) compare falls back to the ratio
of the stored medians and this script says so: the targets are then not evaluated.

Usage: python scripts/perf_compare.py [--out DIR] [--iters N] [--keep]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

SIZES = "4K,16K,64K,256K,1M,2M,4M,8M,16M,32M"


def run(out: Path, dtype: str, iters: int) -> Path:
    command = [sys.executable, "-m", "allreduce_bench", "run", "--algos", "ring", "--world-sizes", "4",
               "--sizes", SIZES, "--dtype", dtype, "--iters", str(iters), "--out", str(out), "--no-plot"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"perf_compare: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return out


def compare(base: Path, other: Path, out: Path) -> tuple[pd.DataFrame, str]:
    command = [sys.executable, "-m", "allreduce_bench", "compare", str(base), str(other), "--out-dir", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"perf_compare: compare failed:\n{done.stderr[-2000:]}")
    return pd.read_csv(out / "compare.csv"), done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Keep the runs here. [a temporary folder]")
    parser.add_argument("--iters", type=int, default=20, help="Timed iterations per size.")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="perf_compare-"))
    try:
        a = run(out / "float32-a", "float32", args.iters)
        b = run(out / "float32-b", "float32", args.iters)
        c = run(out / "bfloat16", "bfloat16", args.iters)
        same, same_text = compare(a, b, out / "same")
        dtype, dtype_text = compare(a, c, out / "dtype")
        print(same_text + dtype_text)
        sampled = bool((same["base_samples"] > 0).all() and (same["other_samples"] > 0).all())
        at16 = dtype[dtype["size_bytes"] == 16 << 20].iloc[0]
        print("== perf_compare (measured on this machine) ==")
        if not sampled:
            print("runs have NO raw samples (samples.parquet): compare used the ratio of medians only; "
                  "significance targets NOT evaluated")
            print(f"float32 vs float32: ratios {same['ratio'].min():.2f}-{same['ratio'].max():.2f} over "
                  f"{len(same)} sizes")
            print(f"bfloat16 vs float32 at 16M: ratio {at16['ratio']:.2f}")
            return
        flagged = int(same["significant"].fillna(False).astype(bool).sum())
        print(f"1. float32 run 2 vs run 1: {flagged} of {len(same)} sizes significant "
              f"(target <= {len(same) // 10}): {'MET' if flagged <= len(same) // 10 else 'NOT MET'}")
        hit = bool(at16["significant"] == True)  # noqa: E712
        print(f"2. bfloat16 vs float32 at 16M: ratio {at16['ratio']:.2f} [{at16['ci_low']:.2f}, "
              f"{at16['ci_high']:.2f}], {'significant: MET' if hit else 'not significant: NOT MET'}")
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
