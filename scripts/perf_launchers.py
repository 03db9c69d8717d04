#!/usr/bin/env python
"""The launchers users use on the Slurm-emulated cluster (root): figures printed, not a test.

1. speed-up: hierarchical vs flat ring (time ring / time hierarchical at --size) under
   `srun -N 2 --ntasks-per-node 2` on the Slurm-emulated cluster and under `emulate --nodes 2
   --ranks-per-node 2`, both at --rate; --pairs alternating pairs of runs, medians compared.
   Target: the srun speed-up within 10% of emulate's (the same hosts, links and ranks; only
   the launcher differs).
2. the health loop users run (issue 28, point 4), --trials times on a 4-host Slurm-emulated
   cluster at --rate: one host's link set to --slow-ratio of the others (a different host
   each trial), `srun -N 4 allreduce-bench health`, its printed --exclude= fed to
   `sbatch -N 3 --exclude=... scripts/slurm_allreduce.sbatch`. A hit: the slowed host and only
   it named; a miss: the slowed host not named; a false alarm: another host named; clean: the
   batch job on the other three completed with every row right.

Usage: sudo python scripts/perf_launchers.py [--trials 10] [--pairs 3] [--rate 800mbit]
       [--only speedup|health]
The machine may be shared: note `uptime` beside the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from allreduce_bench.core import units  # noqa: E402
from allreduce_bench.emulate import rates  # noqa: E402
from allreduce_bench.emulate.slurm import slurm_cluster  # noqa: E402

CLI = [sys.executable, "-m", "allreduce_bench"]


def rank_env(slurm, **extra) -> dict:
    env = {k: v for k, v in slurm.env.items() if k != "GLOO_SOCKET_IFNAME"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR", **extra)
    return env


def speedup(out: Path, size: int) -> float:
    rows = pd.read_csv(out / "results.csv")
    rows = rows[rows["size_bytes"] == size].set_index("algorithm")["time_us_median"]
    return rows["ring"] / rows["hierarchical"]


def run_checked(command: list[str], env: dict | None, what: str, timeout: float = 600) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def measure_speedups(args, work: Path) -> None:
    size = units.parse_size(args.size)
    options = ["--algos", "ring,hierarchical", "--sizes", args.size, "--samples", str(args.samples),
               "--no-plot"]
    found = {"srun": [], "emulate": []}
    rate = rates.parse_tc_rate(args.rate)
    for pair in range(args.pairs):
        with slurm_cluster(2, rate) as slurm:
            out = work / f"srun-{pair}"
            run_checked(["srun", "-N", "2", "--ntasks-per-node", "2", "--kill-on-bad-exit=1", *CLI, "run",
                         *options, "--out", str(out)], rank_env(slurm), "srun -N 2")
            found["srun"].append(speedup(out, size))
        out = work / f"emulate-{pair}"
        run_checked([*CLI, "emulate", "--nodes", "2", "--ranks-per-node", "2", "--inter-bandwidth",
                     args.rate, *options, "--out", str(out)], {**os.environ, "PYTHONPATH": str(ROOT)},
                    "emulate")
        found["emulate"].append(speedup(out, size))
        print(f"  pair {pair + 1}: ring/hierarchical at {args.size}: srun {found['srun'][-1]:.3f}x, "
              f"emulate {found['emulate'][-1]:.3f}x", flush=True)
    srun, emulate = (statistics.median(found[k]) for k in ("srun", "emulate"))
    gap = srun / emulate - 1
    print(f"speed-up (median of {args.pairs}): srun -N 2 --ntasks-per-node 2 {srun:.3f}x, emulate 2x2 "
          f"{emulate:.3f}x: {gap:+.1%} ({'within' if abs(gap) <= 0.10 else 'OUTSIDE'} the 10% target)")


def health_trial(slurm, trial: int, args, work: Path, rate: float) -> dict:
    slow = f"node{trial % 4}"
    slurm.set_rate(slow, rate * args.slow_ratio)
    out = work / f"health-{trial}"
    started = time.monotonic()
    try:
        done = subprocess.run(["srun", "-N", "4", *CLI, "health", "--timeout", "60", "--no-plot", "--out",
                               str(out)], env=rank_env(slurm), capture_output=True, text=True,
                              timeout=600, cwd=ROOT)
    finally:
        slurm.set_rate(slow, rate)
    health_s = time.monotonic() - started
    try:
        doc = json.loads((out / "health.json").read_text())
        named = {h["host"] for h in doc["hosts"] if h["verdict"] != "ok"}
    except (OSError, ValueError):
        named = set()
    exclude = re.findall(r"^--exclude=(\S+)$", done.stdout, re.M)
    clean = None
    if exclude:
        clean = batch_on_the_rest(slurm, exclude[0], work / f"job-{trial}")
    return {"slow": slow, "named": named, "exit": done.returncode, "exclude": exclude,
            "clean": clean, "health_s": health_s}


def batch_on_the_rest(slurm, exclude: str, out: Path) -> bool:
    """sbatch -N <the others> --exclude=...: completed with every row right?"""
    left = 4 - len(run_checked(["scontrol", "show", "hostnames", exclude], slurm.env, "scontrol").split())
    env = rank_env(slurm, OUT_ROOT=str(out), PYTHON=sys.executable)
    job = run_checked(["sbatch", "--parsable", "-N", str(left), f"--exclude={exclude}",
                       f"--output={out}.out", f"--chdir={ROOT}", "scripts/slurm_allreduce.sbatch",
                       "--quick", "--no-plot"], env, "sbatch").strip().split(";")[0]
    while True:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True,
                               text=True).stdout
        state = re.search(r"JobState=(\w+)", shown).group(1)
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            break
        time.sleep(0.5)
    try:
        rows = pd.read_csv(out / "cpu" / "results.csv")
    except OSError:
        return False
    hosts = json.loads((out / "cpu" / "meta.json").read_text())["hostnames"]
    return state == "COMPLETED" and bool(len(rows)) and (rows["wrong"] == 0).all() \
        and not set(hosts) & set(exclude.split(","))


def measure_health_loop(args, work: Path) -> None:
    rate = rates.parse_tc_rate(args.rate)
    results = []
    with slurm_cluster(4, rate) as slurm:
        for trial in range(args.trials):
            found = health_trial(slurm, trial, args, work, rate)
            results.append(found)
            print(f"  trial {trial + 1}: {found['slow']} at {args.slow_ratio:g} x: named "
                  f"{sorted(found['named']) or 'none'}, exit {found['exit']}, exclude "
                  f"{found['exclude'] or 'none'}, health {found['health_s']:.1f} s, batch on the rest "
                  f"{'clean' if found['clean'] else 'NOT clean' if found['clean'] is False else '-'}",
                  flush=True)
    hits = sum(r["named"] == {r["slow"]} for r in results)
    misses = sum(r["slow"] not in r["named"] for r in results)
    alarms = sum(bool(r["named"] - {r["slow"]}) for r in results)
    clean = sum(bool(r["clean"]) for r in results)
    times = sorted(r["health_s"] for r in results)
    print(f"health loop, {args.trials} trials: {hits} hits, {misses} misses, {alarms} with false "
          f"alarms; sbatch --exclude on the rest clean in {clean}; health {times[0]:.1f}-{times[-1]:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rate", default="800mbit", help="every host's link (tc units)")
    parser.add_argument("--slow-ratio", type=float, default=0.25, help="the slowed host's share")
    parser.add_argument("--size", default="16M")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--only", choices=["speedup", "health"])
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="perf-launchers-") as tmp:
        if args.only != "health":
            measure_speedups(args, Path(tmp))
        if args.only != "speedup":
            measure_health_loop(args, Path(tmp))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
