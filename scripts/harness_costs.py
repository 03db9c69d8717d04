#!/usr/bin/env python
"""What the harness costs itself as the world grows (issue 53, item 4), measured and printed
(not a test). For each N it runs one tiny sweep, so the harness dominates: local gloo worlds
of N ranks (`allreduce-bench run --world-sizes N`) and, as root with `ip netns`, emulated
clusters of M hosts x 2 ranks (`allreduce-bench emulate --nodes M`). Each run has --rows tiny
sizes, native only, --loops 1 --samples S --rounds 1, no extra rounds, no plots, --sched other
(SCHED_FIFO with more ranks than CPUs would measure the scheduler and starve the machine).

This file is also the plugin (allreduce_bench/core/hooks.py) that every rank of a measured run
loads (ALLREDUCE_BENCH_PLUGINS=harness_costs): global rank 0 notes, in the file HARNESS_COSTS_LOG
names, when every rank started, when each recorded sample's clock was about to start, and when
each row was recorded, with its own peak RSS (getrusage). Figures per run:

- first sample: from starting the command to rank 0's first recorded sample (after the
  alignment); `rank 0 up`: to rank 0's rank_starting hook; `last rank up`: the last rank's.
- per-row overhead: the median, over rows 2.., of the time between two rows' records on rank
  0 less rank 0's timed region of the later row (its samples' time_us x loops in
  samples.parquet): warm-up call, the alignment barrier of every sample, the check, the gather
  of every rank's samples, the row's statistics, its samples' parquet part, its CSV line and
  progress. `after samples`: the part after the last sample's clock stopped (check, gather,
  record).
- finish: from the last row's record to the command's exit (the phase's end, teardown,
  results.parquet, the driver's summary).
- meta.json and samples.parquet/ sizes (bytes on disk).
- rank 0's peak memory: the largest VmHWM of its /proc status, polled every 50 ms until it
  exits; the driver's (the command's own process) the same way.

Each figure is fitted against N as a + b N, a + b N log2 N and a + b N + c N^2 (least squares);
the fit with the smallest residual that does not overfit (a quadratic only where it lowers the
residual by more than half) is named, and all are extrapolated to --extrapolate ranks.

Usage: python scripts/harness_costs.py [--ranks 2,4,8,16,32] [--nodes 2,4,8] [--no-emulate]
       [--rows 6] [--samples 5] [--repeat K] [--json FILE] [--table-from FILE...]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from allreduce_bench.core.hooks import hookimpl

LOG_ENV = "HARNESS_COSTS_LOG"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POLL_S = 0.05
FIGURES = [  # (key, column title, unit)
    ("rank0_up_s", "rank 0 up (s)", "s"),
    ("last_rank_up_s", "last rank up (s)", "s"),
    ("first_sample_s", "first sample (s)", "s"),
    ("row_overhead_ms", "per-row overhead (ms)", "ms"),
    ("after_samples_ms", "after samples (ms)", "ms"),
    ("finish_s", "finish (s)", "s"),
    ("wall_s", "wall (s)", "s"),
    ("cpu_per_rank_s", "CPU per rank (s)", "s"),
    ("meta_kb", "meta.json (KB)", "KB"),
    ("samples_kb", "samples.parquet (KB)", "KB"),
    ("rank0_peak_mb", "rank 0 peak (MB)", "MB"),
    ("driver_peak_mb", "driver peak (MB)", "MB"),
]


# ---- the plugin, in every rank of a measured run ------------------------------------------

_sample_times: list[float] = []


def _note(*fields) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as log:
            log.write(json.dumps(fields) + "\n")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@hookimpl
def rank_starting(rank: int) -> None:
    _note("start", rank, time.time(), os.getpid())


@hookimpl
def before_sample(rank: int):
    if rank != 0 or not os.environ.get(LOG_ENV):
        return None
    return lambda: _sample_times.append(time.time())


@hookimpl
def row_recorded(session) -> None:
    if session.env.rank == 0 and os.environ.get(LOG_ENV):
        _note("row", session.rows_done, time.time(), _peak_mb(), list(_sample_times))
        _sample_times.clear()


# ---- the measurement ----------------------------------------------------------------------

def fail(message: str) -> None:
    print(f"harness_costs: error: {message}", file=sys.stderr)
    sys.exit(2)


def say(message: str) -> None:
    print(f"harness_costs: {message}", file=sys.stderr, flush=True)


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def read_log(path: Path) -> list[list]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a rank's exit
    return events


class Poller(threading.Thread):
    """The peak VmHWM of the driver and of rank 0 (its pid from the log), every POLL_S."""

    def __init__(self, driver_pid: int, log: Path):
        super().__init__(daemon=True)
        self.driver_pid, self.log = driver_pid, log
        self.rank0_pid: int | None = None
        self.driver_mb = self.rank0_mb = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(POLL_S):
            if self.rank0_pid is None:
                self.rank0_pid = next((e[3] for e in read_log(self.log) if e[0] == "start" and e[1] == 0), None)
            self.driver_mb = max(self.driver_mb, vm_hwm_mb(self.driver_pid) or 0.0)
            if self.rank0_pid is not None:
                self.rank0_mb = max(self.rank0_mb, vm_hwm_mb(self.rank0_pid) or 0.0)


def dir_kb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1024
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1024 if path.exists() else 0.0


def sizes_arg(rows: int) -> str:
    return ",".join(f"{k}K" for k in range(1, rows + 1))


def command_for(kind: str, n: int, out: Path, args) -> list[str]:
    tiny = ["--sizes", sizes_arg(args.rows), "--algos", "native", "--loops", "1", "--samples",
            str(args.samples), "--rounds", "1", "--extra-budget", "0", "--no-plot", "--sched", "other",
            "--timeout", str(args.timeout), "--out", str(out)]
    if kind == "local":
        return [sys.executable, "-m", "allreduce_bench", "run", "--world-sizes", str(n), *tiny]
    return [sys.executable, "-m", "allreduce_bench", "emulate", "--nodes", str(n), "--ranks-per-node", "2",
            "--inter-bandwidth", "1gbit", *tiny]


def timed_region_s(out: Path) -> list[float]:
    """Rank 0's timed seconds of each row, in the order rows were recorded (results.csv's)."""
    import pandas as pd

    rows = pd.read_csv(out / "results.csv")
    samples = pd.read_parquet(out / "samples.parquet")
    mine = samples[samples["rank"] == 0]
    per_size = (mine["time_us"] * mine["loops"]).groupby(mine["size_bytes"]).sum() / 1e6
    return [float(per_size[size]) for size in rows["size_bytes"]]


def _children_cpu_s() -> float:
    """User + system seconds of the waited-for children (the command, its ranks, torchrun)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(kind: str, n: int, scratch: Path, args) -> dict | str:
    """One run's figures, or why it has none."""
    scratch.mkdir(parents=True, exist_ok=True)
    out, log = scratch / f"{kind}-{n}", scratch / f"{kind}-{n}.log"
    env = dict(os.environ, ALLREDUCE_BENCH_PLUGINS="harness_costs", **{LOG_ENV: str(log)},
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    command = command_for(kind, n, out, args)
    cpu_before, load = _children_cpu_s(), os.getloadavg()[0]
    start = time.time()
    process = subprocess.Popen(command, env=env, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    poller = Poller(process.pid, log)
    poller.start()
    try:
        output, _ = process.communicate(timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return f"took over --run-timeout {args.run_timeout:g} s"
    end = time.time()
    poller.stop.set()
    poller.join()
    if process.returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])
        return f"exited {process.returncode}: {tail}"[:400]
    events = read_log(log)
    starts = [e for e in events if e[0] == "start"]
    rows = [e for e in events if e[0] == "row" and e[4]]
    if not rows or not any(e[1] == 0 for e in starts):
        return f"the plugin logged no rows (was {log} written by the ranks?)"
    timed = timed_region_s(out)
    overheads = [(rows[k][2] - rows[k - 1][2] - timed[k]) * 1e3 for k in range(1, min(len(rows), len(timed)))]
    last_sample_dur = [timed[k] / args.samples for k in range(len(timed))]  # --loops 1: samples of one call
    after = [(row[2] - row[4][-1] - last_sample_dur[k]) * 1e3 for k, row in enumerate(rows[:len(timed)])]
    ranks = n if kind == "local" else 2 * n
    return {
        "kind": kind, "ranks": ranks, "nodes": 1 if kind == "local" else n, "rows": len(rows),
        "rank0_up_s": next(e[2] for e in starts if e[1] == 0) - start,
        "last_rank_up_s": max(e[2] for e in starts) - start,
        "first_sample_s": rows[0][4][0] - start,
        "row_overhead_ms": median(overheads) if overheads else math.nan,
        "after_samples_ms": median(after[1:] or after),
        "finish_s": end - rows[-1][2],
        "wall_s": end - start,
        "cpu_per_rank_s": (_children_cpu_s() - cpu_before) / ranks,
        "meta_kb": dir_kb(out / "meta.json"),
        "samples_kb": dir_kb(out / "samples.parquet"),
        "rank0_peak_mb": max(poller.rank0_mb, max(e[3] for e in rows)),
        "driver_peak_mb": poller.driver_mb,
        "load_before": load,
    }


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# ---- rank 0's own work at large N, timed directly (no processes) --------------------------

def rank0_work(n: int, samples: int, per_node: int = 8) -> dict:
    """What rank 0 computes and writes for a world of `n` ranks, `per_node` to a host, timed in
    this process with made-up CPU ranks' facts: at start-up (world_meta, the link peaks and the
    binding summary twice, as _gather_meta and bind_phase write it, and meta.json), and for one
    row of `samples` samples (the pooled samples, the row's statistics, the rounds' columns, the
    samples' frame and its parquet part). Peak: tracemalloc's, of the row's work, its input
    (every rank's samples as the gather returns them) included."""
    import tracemalloc

    import numpy as np

    from allreduce_bench.core import metrics
    from allreduce_bench.core.measure import binding, link_peaks, rounds
    from allreduce_bench.core.measure import meta as run_meta
    from allreduce_bench.core.results.schema import samples_frame
    from allreduce_bench.core.results.store import SamplesWriter, write_meta

    hosts = [f"node{r // per_node:05d}" for r in range(n)]
    infos = [{"hostname": hosts[r], "device": "AMD EPYC", "pid": 100000 + r, "rank": r,
              "local_rank": r % per_node, "node_rank": r // per_node, "launcher": "srun"} for r in range(n)]
    per_rank = [{"rank": r, "host": hosts[r], "nics": []} for r in range(n)]
    placements = [{"bind": "auto", "how": "core", "cpus": f"{r % per_node * 16}-{r % per_node * 16 + 15}",
                   "numa_nodes": [r % per_node // 4], "why": f"core block {r % per_node} of {per_node}",
                   "sched": "fifo", "sched_why": "SCHED_FIFO priority 1 (--sched other turns it off)"}
                  for r in range(n)]
    found: dict = {"ranks": n, "samples": samples}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        meta = run_meta.world_meta(infos)
        meta["peaks"] = {str(n): {**link_peaks.world_peaks(per_rank, 2.5), "per_rank": per_rank}}
        for _ in range(2):
            meta["binding"] = {str(n): {"summary": binding.summary(placements, hosts), "ranks": placements}}
        write_meta(folder, meta)
        found["startup_s"] = time.perf_counter() - started
        found["meta_kb"] = (Path(folder) / "meta.json").stat().st_size / 1024
        rng = np.random.default_rng(0)
        row = {"run_id": "x", "benchmark": "all_reduce", "algorithm": "native", "world_size": n,
               "size_bytes": 4096, "loops": 1}

        def one_row() -> None:
            per_rank_us = (100 + rng.random((n, samples))).tolist()  # as timing.gather reads them
            pooled = rounds.pooled([per_rank_us])
            metrics.sample_stats(pooled, 1)
            rounds.round_columns([per_rank_us])
            SamplesWriter(Path(folder)).append(samples_frame(row, pooled, range(n), hosts))

        one_row()  # imports and first calls
        started = time.perf_counter()
        one_row()
        found["row_s"] = time.perf_counter() - started
        tracemalloc.start()
        one_row()
        found["row_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        found["samples_kb"] = dir_kb(Path(folder) / "samples.parquet") / 3
    return found


def direct_report(ns: list[int], samples: list[int]) -> list[str]:
    lines = ["### rank 0's own work, timed directly (made-up ranks, 8 a host; no processes, no network)", "",
             "| N | start-up (s) | meta.json (KB) | samples | one row (ms) | row peak (MB) | part (KB) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for n in ns:
        for count in samples:
            say(f"rank 0's own work at N={n}, {count} samples a row")
            w = rank0_work(n, count)
            lines.append(f"| {n:,} | {fmt(w['startup_s'])} | {fmt(w['meta_kb'])} | {count} | "
                         f"{fmt(w['row_s'] * 1e3)} | {fmt(w['row_peak_mb'])} | {fmt(w['samples_kb'])} |")
    return lines + [""]


# ---- fits ---------------------------------------------------------------------------------

MODELS = {
    "linear": lambda n: [1.0, n],
    "N log N": lambda n: [1.0, n * math.log2(n)],
    "quadratic": lambda n: [1.0, n, n * n],
}


def fit(ns: list[int], ys: list[float]) -> dict:
    """Each model's least-squares coefficients and residual (RMS); `best` the model named:
    linear, unless N log N's residual is under 90% of it; a quadratic only with a point to
    spare (4 N or more), a positive N^2 term and under half the better one's residual."""
    import numpy as np

    found: dict[str, dict] = {}
    for name, basis in MODELS.items():
        if len(ns) < len(basis(1.0)) + (name == "quadratic"):
            continue
        a = np.array([basis(float(n)) for n in ns])
        coef, *_ = np.linalg.lstsq(a, np.array(ys, dtype=float), rcond=None)
        residual = float(np.sqrt(np.mean((a @ coef - np.array(ys)) ** 2)))
        found[name] = {"coef": [float(c) for c in coef], "rms": residual}
    if "linear" not in found:
        return {"best": None, "models": found}
    best = "N log N" if found["N log N"]["rms"] < 0.9 * found["linear"]["rms"] else "linear"
    if "quadratic" in found and found["quadratic"]["coef"][2] > 0 \
            and found["quadratic"]["rms"] < 0.5 * found[best]["rms"]:
        best = "quadratic"
    return {"best": best, "models": found}


def at(model: str, coef: list[float], n: float) -> float:
    return sum(c * b for c, b in zip(coef, MODELS[model](float(n))))


def fmt(value: float) -> str:
    if value != value:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def report(results: list[dict], extrapolate: int) -> list[str]:
    """Per kind of world, one table: a figure a line, its value at each N measured, the fit
    named (`fit`) and its value at `extrapolate` ranks, beside the linear fit's and the
    quadratic's there (rows of one N only: no fit)."""
    lines = []
    for kind in ("local", "emulated"):
        mine = sorted((r for r in results if r["kind"] == kind), key=lambda r: r["ranks"])
        if not mine:
            continue
        ns = [r["ranks"] for r in mine]
        title = "local gloo, one host" if kind == "local" else "emulated cluster, hosts x 2 ranks"
        head = " | ".join(f"N={n}" for n in ns)
        lines += [f"### {title}: N = {', '.join(map(str, ns))} ranks", "",
                  f"| figure | {head} | fit | at {extrapolate:,} | linear | quadratic |",
                  "|---|" + "---:|" * len(ns) + "---|---:|---:|---:|"]
        for key, title_, _ in FIGURES:
            ys = [r[key] for r in mine]
            found = fit(ns, ys) if len(ns) >= 2 and not any(y != y for y in ys) else {"best": None, "models": {}}
            models = found["models"]

            def value(model: str | None) -> str:
                return fmt(at(model, models[model]["coef"], extrapolate)) if model and model in models else "-"

            lines.append(f"| {title_} | " + " | ".join(fmt(y) for y in ys) +
                         f" | {found['best'] or '-'} | {value(found['best'])} | {value('linear')} | "
                         f"{value('quadratic')} |")
        lines.append("")
    return lines


def numbers(text: str, what: str, zero: bool = False) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{what} takes comma-separated whole numbers, not {text!r}")
    if not values or min(values) < (0 if zero else 1):
        fail(f"{what} takes positive whole numbers, not {text!r}")
    return values


def emulation_missing() -> str | None:
    """Why the emulated cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "no ip/tc (iproute2)"
    probe = f"hc-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "`ip netns add` refused (no network namespaces here)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description="What the harness costs itself as N grows (issue 53, item 4): "
                                     "start-up, per-row overhead, finish, file sizes and rank 0's memory.")
    parser.add_argument("--ranks", default="2,4,8,16,32", help="local gloo world sizes (default 2,4,8,16,32)")
    parser.add_argument("--nodes", default="2,4,8", help="emulated hosts, 2 ranks each (default 2,4,8)")
    parser.add_argument("--no-emulate", action="store_true", help="skip the emulated cluster")
    parser.add_argument("--rows", type=int, default=6, help="tiny sizes 1K..<rows>K, one row each (default 6)")
    parser.add_argument("--samples", type=int, default=5, help="samples per row, of one call each (default 5)")
    parser.add_argument("--timeout", type=float, default=120.0, help="the runs' --timeout (default 120)")
    parser.add_argument("--run-timeout", type=float, default=300.0, help="seconds one run may take (default 300)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per N; each figure their minimum, the least disturbed (default 1)")
    parser.add_argument("--extrapolate", type=int, default=4096, help="N to extrapolate to (default 4096)")
    parser.add_argument("--direct", default="256,1024,4096",
                        help="N at which rank 0's own work is also timed directly, in this process "
                             "(default 256,1024,4096; 0: none)")
    parser.add_argument("--direct-samples", default="50,200",
                        help="samples a row for the direct timing (default 50,200: CPU's and GPU's most)")
    parser.add_argument("--json", type=Path, help="also append one JSON object a line per run to this file")
    parser.add_argument("--table-from", type=Path, nargs="+", metavar="JSONL",
                        help="measure nothing: the table and fits of runs an earlier --json wrote")
    parser.add_argument("--keep", type=Path, help="keep the runs' outputs in this folder")
    args = parser.parse_args()
    ranks, nodes = numbers(args.ranks, "--ranks"), numbers(args.nodes, "--nodes")
    direct = [n for n in numbers(args.direct, "--direct", zero=True) if n]
    direct_samples = numbers(args.direct_samples, "--direct-samples")
    if args.rows < 2 or args.samples < 1:
        fail("--rows needs at least 2 (the overhead is between rows) and --samples at least 1")
    if args.repeat < 1:
        fail("--repeat needs at least 1")
    if args.table_from:
        results = least([r for path in args.table_from for r in read_results(path)])
        print("\n".join(report(sorted(results, key=lambda r: (r["kind"], r["ranks"])), args.extrapolate)))
        return
    plans = [("local", n) for n in ranks]
    if not args.no_emulate:
        why = emulation_missing()
        if why:
            say(f"emulated cluster skipped: {why}")
        else:
            plans += [("emulated", n) for n in nodes]
    scratch = Path(tempfile.mkdtemp(prefix="harness-costs-")) if args.keep is None else args.keep
    scratch.mkdir(parents=True, exist_ok=True)
    results, failed = [], []
    try:
        for (kind, n), repeat in ((plan, i) for plan in plans for i in range(args.repeat)):
            what = f"{kind} N={n}" if kind == "local" else f"{kind} {n} hosts x 2"
            say(f"{what}: running{f' ({repeat + 1} of {args.repeat})' if args.repeat > 1 else ''} "
                f"(load {os.getloadavg()[0]:.1f})")
            result = measure(kind, n, scratch / f"{repeat}", args)
            if isinstance(result, str):
                say(f"  {what} left out: {result}")
                failed.append(what)
                continue
            say(f"  {result['wall_s']:.1f} s wall, first sample at {result['first_sample_s']:.1f} s, "
                f"per-row overhead {result['row_overhead_ms']:.0f} ms, rank 0 peak {result['rank0_peak_mb']:.0f} MB")
            results.append(result)
            if args.json:
                with open(args.json, "a") as out:
                    out.write(json.dumps(result) + "\n")
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    lines = report(least(results), args.extrapolate)
    if direct:
        lines += direct_report(direct, direct_samples)
    print("\n".join(lines))
    if failed:
        say(f"{len(failed)} run(s) left out: {', '.join(failed)}")
        sys.exit(1)


def least(results: list[dict]) -> list[dict]:
    """One result per (kind, N): each figure the minimum over its runs (--repeat)."""
    found: dict[tuple, dict] = {}
    for r in results:
        key = (r["kind"], r["ranks"])
        found[key] = {**r, **{k: min(r[k], found[key][k]) for k, _, _ in FIGURES if k in r}} if key in found else r
    return list(found.values())


def read_results(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        fail(f"{path}: not the JSON lines --json writes ({error})")
        return []


if __name__ == "__main__":
    main()
