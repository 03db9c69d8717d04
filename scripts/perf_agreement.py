#!/usr/bin/env python
"""Do runs agree with each other? The targets of issue 22, measured and printed (not a test).

1. Identical configurations: RUNS runs of `run --algos ring,native --world-sizes 2,4 --sizes
   64K,1M,16M`, compared pairwise with `compare`: the share of comparisons called significant
   (target <= 5%).
2. A real difference: ring at 32M stored as 16M (twice the bytes; bfloat16 at the same --sizes
   moves the same bytes, so on gloo's CPU path it is no real difference), compared with each run
   of part 1 and with all of them as one side (a folder of runs): still called significant.
3. Harness against a minimal back-to-back loop (nccl-tests' method: barrier, k calls, one
   clock, MAX over ranks), N = 2 and 4, 64K-64M: RUNS runs of the harness (native) and of the
   loop with the same binding, alternating (with --baseline DIR, also the harness of the
   checkout DIR, e.g. the code before a change, in the same alternation). Per size the ratio of
   medians harness / loop (target 0.95-1.05 at 4M-64M; below 4M the harness's median inside the
   loop's own min-max over runs), the run-to-run spread (max - min) / median of busbw (target
   at N = 2: harness <= loop), and the rows' skew_share (how much of a sample was the barrier's
   exit skew: median and max over runs). Beside them the same two figures from the rows'
   time_us_mean (the mean over the same samples, the loop's own statistic), which tells what
   the samples hold from what the median makes of them.
4. The default run bound (`--bind auto`) and unbound (`--bind none`): the placement meta.json
   records, and the speed-up of binding at <= 1M side by side.
5. The default run's wall time (target < 30 s).
6. Ring AllReduce against ring ReduceScatter + ring AllGather of the same buffer, 16M and 64M,
   N = 2 and 4 (RUNS runs of `run --in-place`): time(AR) / (time(RS in place) + time(AG in
   place)) (target 0.9-1.1: the ring AllReduce is those two phases, in place on one buffer),
   and beside it, for the record, the same ratio of the out-of-place halves.

The load average is printed with every part: on a shared machine the figures are noisy.

Usage: python scripts/perf_agreement.py [--runs 4] [--parts 1,2,3,4,5,6] [--rounds R] [--out DIR]
       [--baseline DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

SIZES = "64K,1M,16M"
LOOP_SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
HERE = Path(__file__).resolve().parent
ROUNDS: list[str] = []  # --rounds R passed on to the runs of parts 1-3 (default: run's own)


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def bench(*args: str, code: Path | None = None) -> float:
    """`allreduce-bench ARGS` (from the checkout `code`, else the one importable here); its wall
    seconds. Exits with its stderr when it fails."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)} if code else None
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", *args], capture_output=True,
                          text=True, env=env)
    if done.returncode not in (0, 1) or (done.returncode == 1 and args[0] != "compare"):
        sys.exit(f"perf_agreement: allreduce-bench {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def compare(base: Path, other: Path, out: Path) -> pd.DataFrame:
    bench("compare", str(base), str(other), "--out-dir", str(out))
    return pd.read_csv(out / "compare.csv")


def identical(out: Path, runs: int) -> list[Path]:
    print(f"\n1. identical configurations: {runs} runs of ring and native, N = 2 and 4, {SIZES} "
          f"({load()})")
    made = []
    for k in range(runs):
        made.append(out / "same" / str(k))
        wall = bench("run", "--algos", "ring,native", "--world-sizes", "2,4", "--sizes", SIZES,
                     "--out", str(made[-1]), "--no-plot", *ROUNDS)
        print(f"   run {k}: {wall:.1f} s")
    tables = [compare(a, b, out / f"compare-{i}-{j}")
              for (i, a), (j, b) in itertools.combinations(enumerate(made), 2)]
    table = pd.concat(tables, ignore_index=True)
    flagged = table["significant"].fillna(False).astype(bool)
    share = flagged.mean()
    print(f"   {int(flagged.sum())} of {len(table)} pairwise comparisons significant = {share:.1%} "
          f"(target <= 5%: {'MET' if share <= 0.05 else 'NOT MET'}); rounds per side "
          f"{int(table['base_rounds'].median())}")
    print("   ratio range per size over all pairs (min-max):")
    for (algorithm, n, size), group in table.groupby(["algorithm", "world_size", "size_bytes"]):
        print(f"     {algorithm:>7} N={n} {size >> 10:>6}K  {group['ratio'].min():.2f}-"
              f"{group['ratio'].max():.2f}  round spread {group['round_spread'].median():.0%}  "
              f"flagged {int(group['significant'].fillna(False).astype(bool).sum())}/{len(group)}")
    return made


def relabel(run: Path, size: str, as_size: str) -> None:
    """Rows and samples of `size` in `run` renamed `as_size`: the run then reads as a build in
    which `as_size` moves twice the bytes (a real regression, of known size)."""
    from allreduce_bench.core.units import parse_size

    old, new = parse_size(size, "size"), parse_size(as_size, "size")
    rows = pd.read_csv(run / "results.csv")
    rows.loc[rows["size_bytes"] == old, "size_bytes"] = new
    rows.to_csv(run / "results.csv", index=False)
    for part in (run / "samples.parquet").glob("*.parquet"):
        frame = pd.read_parquet(part)
        frame.loc[frame["size_bytes"] == old, "size_bytes"] = new
        frame.to_parquet(part, index=False)


def real_difference(out: Path, float32_runs: list[Path]) -> None:
    """Ring at 32M stored as 16M against the float32 runs' 16M: twice the bytes, about twice
    the time at gloo's bandwidth plateau. (bfloat16 at the same --sizes moves the same bytes:
    on gloo's CPU path it differs only by the reduction's arithmetic, no real difference.)"""
    print(f"\n2. a real difference: ring moving 2x the bytes (32M, stored as 16M) against the "
          f"runs' 16M ({load()})")
    double = out / "double"
    bench("run", "--algos", "ring", "--world-sizes", "2,4", "--sizes", "32M", "--out", str(double),
          "--no-plot", *ROUNDS)
    relabel(double, "32M", "16M")
    named = [(f"run {k}", base) for k, base in enumerate(float32_runs)]
    met = []
    for name, base in named + [(f"all {len(float32_runs)} runs (a folder)", out / "same")]:
        table = compare(base, double, out / f"compare-double-{base.name}")
        for row in table[(table["algorithm"] == "ring") & (table["size_bytes"] == 16 << 20)].itertuples():
            met.append(row.significant == True)  # noqa: E712
            print(f"   {name} -> 2x bytes, N={row.world_size}: ratio {row.ratio:.2f} "
                  f"[{row.ci_low:.2f}, {row.ci_high:.2f}] "
                  f"{'significant: MET' if met[-1] else 'not significant: NOT MET'}")
    print(f"   flagged {sum(met)} of {len(met)} (target: all)")


def minimal_loop_rank(sizes: list[int]) -> dict[int, float]:
    """On each rank: bound as the harness binds (one core per rank), the minimal loop's us per
    call per size, about 0.1 s of calls each (the harness's default budget)."""
    import torch.distributed as dist

    from allreduce_bench.core.measure.binding import bind_rank

    spec = importlib.util.spec_from_file_location("perf_core", HERE / "perf_core.py")
    perf_core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(perf_core)
    bind_rank("auto", int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]),
              started_here=True)
    dist.init_process_group("gloo")
    found = {}
    for size in sizes:
        first = perf_core.minimal_loop_us(size, 2)
        calls = max(5, min(400, int(0.1e6 / max(first, 1.0))))
        found[size] = perf_core.minimal_loop_us(size, calls)
    dist.destroy_process_group()
    return found


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def harness_against_loop(out: Path, runs: int, baseline: Path | None) -> None:
    from allreduce_bench.core.launch.local import launch_local
    from allreduce_bench.core.metrics import busbw_GBps

    sizes = ",".join(f"{s >> 10}K" for s in LOOP_SIZES)
    kinds = ["harness", "loop"] + (["baseline"] if baseline else [])
    for n in (2, 4):
        print(f"\n3. N = {n}: harness (native) vs minimal loop{' vs baseline ' + str(baseline) if baseline else ''}"
              f", {runs} runs each alternating ({load()})")
        busbw: dict[tuple[str, int], list[float]] = {}
        skew: dict[int, list[float]] = {}
        for k in range(runs):
            for kind in (kinds if k % 2 == 0 else kinds[::-1]):
                if kind == "loop":
                    for size, us in launch_local(n, minimal_loop_rank, LOOP_SIZES)[0].items():
                        busbw.setdefault(("loop", size), []).append(busbw_GBps(size, us, n))
                    continue
                run_dir = out / f"{kind}-{n}-{k}"
                bench("run", "--algos", "native", "--world-sizes", str(n), "--sizes", sizes, "--out",
                      str(run_dir), "--no-plot", *ROUNDS, code=baseline if kind == "baseline" else None)
                rows = pd.read_csv(run_dir / "results.csv").set_index("size_bytes")
                for size in LOOP_SIZES:
                    busbw.setdefault((kind, size), []).append(float(rows.loc[size, "busbw_GBps"]))
                    if kind == "harness":  # the same samples' mean, the statistic the loop takes
                        busbw.setdefault(("mean", size), []).append(
                            busbw_GBps(size, float(rows.loc[size, "time_us_mean"]), n))
                    if kind == "harness" and "skew_share" in rows.columns:
                        skew.setdefault(size, []).append(float(rows.loc[size, "skew_share"]))
            print(f"   round {k}: done ({load()})")
        extra = f" {'baseline':>9} {'ratio b':>8} {'spread b':>9}" if baseline else ""
        print(f"   {'size':>6} {'harness GB/s':>13} {'loop GB/s':>10} {'loop range':>13} {'ratio':>6} "
              f"{'spread h':>9} {'spread l':>9} {'skew med/max':>13} {'mean ratio':>10} {'spread m':>9}"
              f"{extra}  verdict")
        for size in LOOP_SIZES:
            h, m = busbw[("harness", size)], busbw[("loop", size)]
            ratio = statistics.median(h) / statistics.median(m)
            level = (0.95 <= ratio <= 1.05) if size >= 4 << 20 else min(m) <= statistics.median(h) <= max(m)
            steady = n != 2 or spread(h) <= spread(m)
            skews = skew.get(size, [math.nan])
            line = (f"   {size >> 10:>5}K {statistics.median(h):>13.3f} {statistics.median(m):>10.3f} "
                    f"{min(m):>6.3f}-{max(m):<6.3f} {ratio:>6.2f} {spread(h):>9.2f} {spread(m):>9.2f} "
                    f"{statistics.median(skews):>6.1%}/{max(skews):<6.1%}")
            a = busbw[("mean", size)]
            line += f" {statistics.median(a) / statistics.median(m):>10.2f} {spread(a):>9.2f}"
            if baseline:
                b = busbw[("baseline", size)]
                middle = statistics.median(b)
                line += f" {middle:>9.3f} {middle / statistics.median(m):>8.2f} {spread(b):>9.2f}"
            verdict = "MET" if level and steady else "NOT MET (" + ", ".join(
                [w for w, ok in (("level", level), ("spread", steady)) if not ok]) + ")"
            print(f"{line}  {verdict}")


def decomposition(out: Path, runs: int) -> None:
    """Ring AllReduce against ring ReduceScatter + ring AllGather of the same buffer: the
    in-place halves (like for like: the AllReduce works in place), the out-of-place ones beside."""
    print(f"\n6. ring AllReduce / (ring ReduceScatter + ring AllGather) in place (out of place "
          f"beside), 16M and 64M, N = 2 and 4, {runs} runs ({load()})")
    ratios: dict[tuple[str, int, int], list[float]] = {}
    for k in range(runs):
        run_dir = out / f"decomposition-{k}"
        bench("run", "--algos", "ring", "--collectives", "all_reduce,reduce_scatter,all_gather",
              "--in-place", "--world-sizes", "2,4", "--sizes", "16M,64M", "--out", str(run_dir),
              "--no-plot", *ROUNDS)
        rows = pd.read_csv(run_dir / "results.csv")
        times = rows.set_index(["benchmark", "world_size", "size_bytes"])["time_us_median"]
        for n in (2, 4):
            for size in (16 << 20, 64 << 20):
                for half, suffix in (("in place", "-in-place"), ("out of place", "")):
                    parts = times[(f"reduce_scatter{suffix}", n, size)] + times[(f"all_gather{suffix}", n, size)]
                    ratios.setdefault((half, n, size), []).append(times[("allreduce", n, size)] / parts)
        print(f"   run {k}: done ({load()})")
    for n in (2, 4):
        for size in (16 << 20, 64 << 20):
            values, record = ratios[("in place", n, size)], ratios[("out of place", n, size)]
            middle = statistics.median(values)
            print(f"   N={n} {size >> 20:>3}M: median {middle:.2f} (runs {min(values):.2f}-{max(values):.2f}) "
                  f"{'MET' if 0.9 <= middle <= 1.1 else 'NOT MET'}; out-of-place halves: median "
                  f"{statistics.median(record):.2f} (runs {min(record):.2f}-{max(record):.2f})")


def bound_against_unbound(out: Path) -> None:
    print(f"\n4./5. the default run bound and unbound ({load()})")
    walls = {}
    for bind in ("auto", "none", "auto", "none"):  # alternating, twice each
        k = sum(1 for name in walls if name[0] == bind)
        walls[(bind, k)] = bench("run", "--bind", bind, "--out", str(out / f"default-{bind}-{k}"))
    frames = {}
    for (bind, k), wall in walls.items():
        meta = json.loads((out / f"default-{bind}-{k}" / "meta.json").read_text())
        placed = "; ".join(f"N={n}: {b['summary']}" for n, b in sorted((meta.get("binding") or {}).items()))
        print(f"   --bind {bind} run {k}: {wall:.1f} s wall; placement: {placed or 'not recorded'}")
        frames[(bind, k)] = pd.read_csv(out / f"default-{bind}-{k}" / "results.csv")
    print(f"   median time (us) at <= 1M, bound / unbound (two runs each; {load()}):")
    key = ["algorithm", "world_size", "size_bytes"]
    medians = {bind: pd.concat([f for (b, _), f in frames.items() if b == bind])
               .groupby(key)["time_us_median"].median() for bind in ("auto", "none")}
    both = pd.concat(medians, axis=1).reset_index()
    both = both[both["size_bytes"] <= 1 << 20]
    for row in both.itertuples():
        print(f"     {row.algorithm:>18} N={row.world_size} {row.size_bytes >> 10:>5}K  "
              f"{row.auto:>9.1f} / {row.none:>9.1f}  speed-up {row.none / row.auto:.2f}x")
    bound_walls = [w for (b, _), w in walls.items() if b == "auto"]
    print(f"   5. default run wall: {', '.join(f'{w:.1f}' for w in bound_walls)} s "
          f"(target < 30 s: {'MET' if max(bound_walls) < 30 else 'NOT MET'}; {load()})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="Runs per configuration.")
    parser.add_argument("--parts", default="1,2,3,4,5,6", help="Which parts to measure.")
    parser.add_argument("--baseline", type=Path, help="Part 3: also time the harness of this "
                        "checkout (its root, put on PYTHONPATH), alternating with the others.")
    parser.add_argument("--out", type=Path, help="Keep the runs here. [a temporary folder]")
    parser.add_argument("--rounds", type=int, help="--rounds of the runs of parts 1-3. [run's default]")
    args = parser.parse_args()
    if args.rounds:
        ROUNDS.extend(["--rounds", str(args.rounds)])
    parts = {int(p) for p in args.parts.split(",") if p}
    out = args.out or Path(tempfile.mkdtemp(prefix="perf-agreement-"))
    print(f"perf_agreement: {os.cpu_count()} CPUs, {load()}")
    try:
        if parts & {1, 2}:
            float32_runs = identical(out, args.runs)
            if 2 in parts:
                real_difference(out, float32_runs)
        if 3 in parts:
            harness_against_loop(out, max(3, args.runs - 1), args.baseline)
        if 6 in parts:
            decomposition(out, max(3, args.runs - 1))
        if parts & {4, 5}:
            bound_against_unbound(out)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print(f"\ndone ({load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
