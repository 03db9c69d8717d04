"""Bandwidth definitions and timing statistics, plain functions of numbers (no torch); algbw and busbw are nccl-tests'
(doc/methodology.md, "algbw and busbw")."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

# the collectives in the order tables, plots and `--collectives all` list them, by nccl-tests' names
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
               "sendrecv")
# busbw / algbw per collective as a function of the world size N
BUSBW_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
# collectives whose buffer is N per-rank parts: nccl-tests counts one rank's part
PER_RANK = ("all_gather", "reduce_scatter", "alltoall")
# collectives measured in a second, in-place half (`run --in-place`; rows: benchmark <name>-in-place)
IN_PLACE_HALVES = ("all_gather", "reduce_scatter")
IN_PLACE = "-in-place"


def benchmark_of(collective: str, in_place: bool = False) -> str:
    """A row's `benchmark`: allreduce, else the collective's name, `-in-place` for an in-place half."""
    name = "allreduce" if collective == "all_reduce" else collective
    return name + IN_PLACE if in_place else name


def busbw_factor(world_size: int, collective: str = "all_reduce") -> float:
    """nccl-tests' busbw factor (AllReduce: 2(N-1)/N)."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return BUSBW_FACTORS[collective](world_size)


def algbw_GBps(size_bytes: float, time_us: float) -> float:
    return size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else float("nan")


def busbw_GBps(size_bytes: float, time_us: float, world_size: int,
               collective: str = "all_reduce") -> float:
    return algbw_GBps(size_bytes, time_us) * busbw_factor(world_size, collective)


def collective_counts(collective: str, size_bytes: int, itemsize: int,
                      world_size: int) -> tuple[int, int]:
    """(count, size_bytes) as nccl-tests' GetCollByteCount sets them: one rank's part (16-byte units) of the
    per-rank collectives, else the whole buffer."""
    count = size_bytes // itemsize
    if collective not in PER_RANK:
        return count, count * itemsize
    per_rank = (count // world_size) & ~(max(1, 16 // itemsize) - 1)
    return per_rank, per_rank * world_size * itemsize


# `unstable`: the median's confidence interval reaches beyond TRUSTED_TO, or its rounds' medians spread beyond
# ROUNDS_DISAGREE and Kruskal-Wallis p < ROUNDS_ALPHA (doc/methodology.md, "Unstable rows")
TRUSTED_TO = 0.10
CONFIDENCE = 0.90
ROUNDS_DISAGREE = 2 * TRUSTED_TO
ROUNDS_ALPHA = 0.05
# two states: a gap > STATE_GAP splits the samples, each side >= STATE_MIN_SHARE, medians STATE_RATIO apart
STATE_GAP = 1.25
STATE_MIN_SHARE = 0.10
STATE_RATIO = 1.5
NO_STATES = {"fast_us_median": math.nan, "fast_share": math.nan, "slow_us_median": math.nan,
             "slow_share": math.nan}


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high): the median's distribution-free confidence interval, from order statistics."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    below, j = 0.0, 0  # below = P(B < j + 1) as j grows
    while j + 1 <= n // 2:
        below += math.comb(n, j) / 2.0 ** n
        if 1.0 - 2.0 * below < confidence:
            break
        j += 1
    j = max(j, 1)
    return float(x[j - 1]), float(x[n - j])


def untrusted(median: float, interval: tuple[float, float]) -> bool:
    """True when the median's confidence interval reaches beyond TRUSTED_TO of it."""
    low, high = interval
    if not median > 0:
        return False
    return bool(max(median - low, high - median) > TRUSTED_TO * median)


def two_states(values: Sequence[float]) -> dict:
    """The two states' medians and shares where the samples split at a wide gap; NaNs otherwise."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    least = max(1, math.ceil(STATE_MIN_SHARE * n))
    if n < 2 * least or n < 5 or x[0] <= 0:
        return dict(NO_STATES)
    ratios = x[least:n - least + 1] / x[least - 1:n - least]  # split after index least-1 ...
    cut = int(np.argmax(ratios)) + least  # the first slow sample
    fast, slow = x[:cut], x[cut:]
    if ratios.max() <= STATE_GAP or np.median(slow) < STATE_RATIO * np.median(fast):
        return dict(NO_STATES)
    return {"fast_us_median": float(np.median(fast)), "fast_share": len(fast) / n,
            "slow_us_median": float(np.median(slow)), "slow_share": len(slow) / n}


def sample_stats(per_rank_us, loops: int = 1) -> dict:
    """A row's numbers from `per_rank_us[rank][sample]` (doc/results.md): each sample's time is the MAX over
    ranks; the late rank is the one with the MINIMUM (the others waited for it)."""
    times = np.asarray(per_rank_us, dtype=float)
    if times.ndim != 2 or times.size == 0:
        raise ValueError("no samples")
    slowest = times.max(axis=0)
    series = pd.Series(slowest)
    median = float(series.median())
    interval = median_interval(slowest)
    mean = float(series.mean())
    cv = float(series.std(ddof=0) / mean) if mean > 0 else math.nan
    late = times.argmin(axis=0)
    counts = np.bincount(late, minlength=times.shape[0])
    rank = int(counts.argmax())
    return {
        "time_us_median": median,
        "time_us_mean": mean,
        "time_us_p5": float(series.quantile(0.05)),
        "time_us_p95": float(series.quantile(0.95)),
        "time_us_p99": float(series.quantile(0.99)),
        "time_us_min": float(series.min()),
        "time_us_max": float(series.max()),
        "time_cv": cv,
        "time_us_ci_low": interval[0],
        "time_us_ci_high": interval[1],
        "unstable": untrusted(median, interval),
        **two_states(slowest),
        "time_us_rank_mean": float(times.mean(axis=1).mean()),
        "late_rank": rank,
        "late_rank_share": float(counts[rank] / times.shape[1]),
        "late_rank_lag_us": float(np.median(times.max(axis=0) - times.min(axis=0)) * loops),
        "skew_share": float(np.median(np.divide(slowest - times.min(axis=0), slowest,
                                                out=np.zeros_like(slowest), where=slowest > 0))),
    }
