"""A job's collectives (an NCCL Inspector import) against a benchmark run of the same cluster:
size by size, the job's busbw as a share of the benchmark's (interpolated log-log between
measured sizes, never extrapolated; `native` where measured, as NCCL picks for the job)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import IN_PLACE, benchmark_of, busbw_GBps
from allreduce_bench.core.units import format_size
from allreduce_bench.interop.job import BENCHMARK as JOB

COLUMNS = ["collective", "world_size", "size_bytes", "calls", "job_us", "job_busbw_GBps",
           "bench_algorithm", "bench_us", "bench_busbw_GBps", "bench_how", "share"]


def is_job(rows: pd.DataFrame) -> bool:
    return "benchmark" in rows.columns and bool((rows["benchmark"] == JOB).any())


def curve(bench: pd.DataFrame, collective: str, world_size: int) -> tuple[str, pd.Series] | None:
    """(algorithm, median time by size): out-of-place, native, else the algorithm of highest busbw."""
    rows = bench[(bench["collective"].fillna("all_reduce") == collective) & (bench["world_size"] == world_size)]
    halves = [benchmark_of(collective), benchmark_of(collective) + IN_PLACE]
    rows = next((rows[rows["benchmark"] == h] for h in halves if (rows["benchmark"] == h).any()), rows.iloc[:0])
    if rows.empty:
        return None
    names = set(rows["algorithm"].astype(str))
    algorithm = "native" if "native" in names else rows.groupby("algorithm")["busbw_GBps"].median().idxmax()
    times = rows[rows["algorithm"] == algorithm].groupby("size_bytes")["time_us_median"].median()
    return str(algorithm), times.sort_index()


def time_at(times: pd.Series, size: int) -> tuple[float, str]:
    """The benchmark's time at `size`, and how: measured, interpolated or outside its sizes."""
    if size in times.index:
        return float(times.loc[size]), "measured"
    sizes = times.index.to_numpy(dtype=float)
    if len(sizes) < 2 or not sizes[0] < size < sizes[-1]:
        return float("nan"), f"outside the measured {format_size(sizes[0])}-{format_size(sizes[-1])}"
    logged = np.interp(np.log(size), np.log(sizes), np.log(times.to_numpy(dtype=float)))
    return float(np.exp(logged)), "interpolated"


def compare_job(bench: pd.DataFrame, job: pd.DataFrame) -> pd.DataFrame:
    job = job[job["benchmark"] == JOB]
    bench = bench[bench["benchmark"] != JOB]
    if job.empty:
        raise UsageError("the job run holds no benchmark=job rows; import NCCL Inspector records first")
    lines = []
    for _, row in job.sort_values(["collective", "world_size", "size_bytes"]).iterrows():
        collective, n, size = row["collective"], int(row["world_size"]), int(row["size_bytes"])
        found = curve(bench, collective, n)
        algorithm, (bench_us, how) = ("", (float("nan"), "not measured")) if found is None \
            else (found[0], time_at(found[1], size))
        bench_bw = busbw_GBps(size, bench_us, n, collective) if bench_us == bench_us else float("nan")
        lines.append({"collective": collective, "world_size": n, "size_bytes": size, "calls": int(row["samples"]),
                      "job_us": float(row["time_us_median"]), "job_busbw_GBps": float(row["busbw_GBps"]),
                      "bench_algorithm": algorithm, "bench_us": bench_us, "bench_busbw_GBps": bench_bw,
                      "bench_how": how, "share": float(row["busbw_GBps"]) / bench_bw if bench_bw > 0 else float("nan")})
    return pd.DataFrame(lines, columns=COLUMNS)


def format_table(table: pd.DataFrame) -> str:
    out = []
    for (collective, n), group in table.groupby(["collective", "world_size"], sort=False):
        algorithm = next((a for a in group["bench_algorithm"] if a), "")
        out.append(f"  {collective}, N={n} (benchmark: {algorithm or 'not measured'}):")
        if not algorithm:
            out.append(f"    the benchmark has no {collective} at world size {n}; measure it: allreduce-bench "
                       f"run --collectives {collective} --world-sizes {n}")
            continue
        for r in group.itertuples():
            share = f"{r.share:6.0%}" if r.share == r.share else "     -"
            bench = f"{r.bench_busbw_GBps:10.4g} GB/s ({r.bench_how})" if r.bench_busbw_GBps == r.bench_busbw_GBps \
                else f"{'-':>15} ({r.bench_how})"
            out.append(f"    {format_size(r.size_bytes):>6}  job {r.job_busbw_GBps:10.4g} GB/s (median of {r.calls} "
                       f"calls)  benchmark {bench}  {share}")
    shares = table["share"].dropna()
    if len(shares):
        low = table.loc[shares.idxmin()]
        out.append(f"  the job's busbw is {shares.median():.0%} of the benchmark's (median over {len(shares)} "
                   f"sizes); lowest {low['share']:.0%}: {low['collective']} {format_size(low['size_bytes'])} "
                   f"N={low['world_size']}")
    return "\n".join(out)


def call_busbw(job_samples: pd.DataFrame) -> pd.DataFrame:
    """Every call of the job (its slowest rank's time) and its busbw, for the figure."""
    if job_samples.empty:
        return pd.DataFrame(columns=["collective", "world_size", "size_bytes", "busbw_GBps"])
    samples = job_samples[job_samples["benchmark"] == JOB]
    by = ["operation", "world_size", "size_bytes", "sample"]
    timed = samples.groupby(by)["time_us"].max().reset_index().rename(columns={"operation": "collective"})
    timed["busbw_GBps"] = [busbw_GBps(s, t, int(n), c) for c, n, s, t in
                           timed[["collective", "world_size", "size_bytes", "time_us"]].itertuples(index=False)]
    return timed


def figure(table: pd.DataFrame, bench: pd.DataFrame, calls: pd.DataFrame):
    from allreduce_bench.core.analysis.style import plt, size_axis

    panels = list(table.groupby(["collective", "world_size"], sort=False))
    columns = min(3, len(panels))
    grid = -(-len(panels) // columns)
    fig, axes = plt.subplots(grid, columns, figsize=(5 * columns, 3.6 * grid), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, ((collective, n), group) in zip(axes.flat, panels):
        found = curve(bench[bench["benchmark"] != JOB], collective, n)
        if found is not None:
            sizes = found[1].index.to_numpy()
            ax.plot(sizes, [busbw_GBps(s, t, n, collective) for s, t in found[1].items()], marker="o",
                    label=f"benchmark ({found[0]})")
        mine = calls[(calls["collective"] == collective) & (calls["world_size"] == n)]
        ax.scatter(mine["size_bytes"], mine["busbw_GBps"], s=8, alpha=0.3, color="tab:red", label="job's calls")
        ax.scatter(group["size_bytes"], group["job_busbw_GBps"], s=60, marker="D", color="tab:red",
                   edgecolors="black", label="job (median)")
        size_axis(ax)
        ax.set_yscale("log")  # busbw spans decades from latency- to bandwidth-bound sizes
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{collective}, N={n}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("a job's collectives (NCCL Inspector) against the benchmark", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))  # room for the title
    return fig


def write(table: pd.DataFrame, bench: pd.DataFrame, job_samples: pd.DataFrame, out_dir: Path,
          fmt: str = "png") -> tuple[Path, Path]:
    from allreduce_bench.core.analysis.style import save

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "job_vs_benchmark.csv"
    table.to_csv(csv_path, index=False)
    return csv_path, save(figure(table, bench, call_busbw(job_samples)), out_dir / f"job_vs_benchmark.{fmt}")
