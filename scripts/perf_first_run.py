#!/usr/bin/env python
"""The first run's targets (issue 36), measured and printed (not a test). Run it on a quiet
machine (load average < 1, no test suite running); it prints the load before every run.

1. The default `allreduce-bench run`: wall time, median of --runs (target < 20 s on 2 cores),
   and the share of its rows flagged unstable (target <= 20% on a quiet machine).
2. The default run beside two CPU hogs: the share flagged, and how many rows' rounds disagreed
   (> 20%): each of those must be flagged.
3. --sched fifo against --sched other (the measure against gloo's slow state), alternating,
   --rounds rounds, N=2, 16K and 1M, 300 calls each a sample of its own (loops 1, the
   harness's alignment before each): per-call median, p10/p90 and the share of calls in the
   slow state, both ways (slow: above the valley between the two humps of the pooled
   log-histogram, doc/noise.md).
4. report.html of the first default run: its size, its figures.

Usage: python scripts/perf_first_run.py [--runs 3] [--rounds 5] [--parts 1,2,3,4]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout measured, installed or not
SIZES = {"16K": 16 << 10, "1M": 1 << 20}
HOG = "while True: pass"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(out: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, the process) of one `allreduce-bench run` into `out`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"perf_first_run: run {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return wall, done


def flagged(out: Path) -> tuple[int, int, int]:
    """(rows, rows flagged unstable, rows whose rounds disagreed by > 20%)."""
    from allreduce_bench.core.metrics import ROUNDS_DISAGREE

    rows = pd.read_csv(out / "results.csv")
    return len(rows), int(rows["unstable"].sum()), int((rows["round_spread"] > ROUNDS_DISAGREE).sum())


def summary_lines(done: subprocess.CompletedProcess, *starts: str) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(starts)]


def default_runs(scratch: Path, count: int) -> Path:
    print(f"\n1. the default run, {count} times (target: median wall < 20 s; <= 20% of rows unstable)")
    walls = []
    for i in range(count):
        before = load()
        wall, done = run(scratch / f"default-{i}")
        rows, unstable, by_rounds = flagged(scratch / f"default-{i}")
        walls.append(wall)
        print(f"   run {i + 1}: {wall:.1f} s wall, {unstable} of {rows} rows unstable "
              f"({100 * unstable / rows:.0f}%; {by_rounds} by rounds), load before {before}")
    print(f"   median wall {statistics.median(walls):.1f} s")
    for line in summary_lines(done, "machine:", "world sizes left out", "two states:", "unstable:"):
        print(f"   last run's summary: {line}")
    return scratch / "default-0"


def beside_hogs(scratch: Path) -> None:
    print("\n2. the default run beside two CPU hogs (every row whose rounds disagree is flagged)")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        time.sleep(1.0)
        before = load()
        wall, done = run(scratch / "hogs")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    rows, unstable, by_rounds = flagged(scratch / "hogs")
    table = pd.read_csv(scratch / "hogs" / "results.csv")
    missed = int(((table["round_spread"] > 0.2) & ~table["unstable"].astype(bool)).sum())
    print(f"   {wall:.1f} s wall, {unstable} of {rows} rows unstable, {by_rounds} rounds disagreed, "
          f"{missed} of those not flagged; load before {before}")
    for line in summary_lines(done, "machine:", "unstable:"):
        print(f"   summary: {line}")


def per_call_times(out: Path) -> dict[str, np.ndarray]:
    """size label -> every call's time (the slower rank's), from samples.parquet (loops 1)."""
    samples = pd.read_parquet(out / "samples.parquet")
    slowest = samples.groupby(["size_bytes", "round", "sample"])["time_us"].max().reset_index()
    return {label: slowest[slowest["size_bytes"] == size]["time_us"].to_numpy()
            for label, size in SIZES.items()}


def valley(times: np.ndarray) -> float:
    """The slow-state threshold: the lower edge of the emptiest 0.1-decade bin between the fast
    mode (the fullest bin) and the fullest bin >= 4x above it; 4x the fast mode without one."""
    logs = np.log10(times)
    edges = np.arange(np.floor(logs.min() * 10) / 10, logs.max() + 0.2, 0.1)
    counts, edges = np.histogram(logs, edges)
    fast = int(counts.argmax())
    above = [i for i in range(len(counts)) if edges[i] >= edges[fast] + np.log10(4)]
    if not above or counts[above].max() == 0:
        return float(10 ** (edges[fast] + np.log10(4)))
    slow = max(above, key=lambda i: counts[i])
    between = range(fast + 1, slow)
    gap = min(between, key=lambda i: counts[i]) if between else slow
    return float(10 ** edges[gap])


def sched_on_off(scratch: Path, rounds: int) -> None:
    print(f"\n3. --sched fifo against --sched other, alternating, {rounds} rounds, N=2, 300 calls "
          "each a sample of its own")
    args = ["--world-sizes", "2", "--sizes", ",".join(SIZES), "--algos", "native", "--loops", "1",
            "--samples", "300", "--rounds", "1", "--warmup", "30", "--no-plot"]
    found: dict[str, dict[str, list]] = {"fifo": {s: [] for s in SIZES}, "other": {s: [] for s in SIZES}}
    for r in range(rounds):
        for sched in ("fifo", "other") if r % 2 == 0 else ("other", "fifo"):
            before = load()
            out = scratch / f"sched-{sched}-{r}"
            run(out, *args, "--sched", sched)
            for label, times in per_call_times(out).items():
                found[sched][label].append(times)
            print(f"   round {r + 1} {sched}: load before {before}")
    for label in SIZES:
        pooled = np.concatenate([t for sched in found for t in found[sched][label]])
        threshold = valley(pooled)
        print(f"   {label}: slow = a call above {threshold:.0f} us")
        for sched in ("fifo", "other"):
            times = np.concatenate(found[sched][label])
            p10, p50, p90 = np.percentile(times, [10, 50, 90])
            per_round = " ".join(f"{100 * (t > threshold).mean():.0f}" for t in found[sched][label])
            print(f"     {sched:5}: median {p50:.0f} us (p10 {p10:.0f}, p90 {p90:.0f}), slow "
                  f"{100 * (times > threshold).mean():.1f}% (per round: {per_round})")


def report_page(run_dir: Path) -> None:
    print("\n4. report.html of the first default run")
    page = run_dir / "plots" / "report.html"
    text = page.read_text(encoding="utf-8")
    print(f"   {page}: {page.stat().st_size / 1024:.0f} KiB, {text.count('<svg')} figures inline, "
          f"{text.count('<table')} tables; in a browser: python -m pytest tests/core/test_report_html.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parts", default="1,2,3,4")
    options = parser.parse_args()
    parts = {int(p) for p in options.parts.split(",")}
    print(f"perf_first_run: {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} allowed), "
          f"load {load()}")
    with tempfile.TemporaryDirectory(prefix="perf-first-run-") as scratch:
        scratch = Path(scratch)
        first = default_runs(scratch, options.runs) if parts & {1, 4} else None
        if 2 in parts:
            beside_hogs(scratch)
        if 3 in parts:
            sched_on_off(scratch, options.rounds)
        if 4 in parts and first is not None:
            report_page(first)


if __name__ == "__main__":
    main()
