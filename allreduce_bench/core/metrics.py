"""Bandwidth definitions and timing statistics: plain functions of numbers (no torch).

algbw = size_bytes / time and busbw = algbw x the collective's factor, in decimal GB/s, exactly
as nccl-tests defines them (doc/PERFORMANCE.md, each src/<collective>.cu's GetBw): AllReduce
2(N-1)/N; ReduceScatter, AllGather and AllToAll (N-1)/N; Broadcast, Reduce and SendRecv 1.
`size_bytes` is the whole buffer as nccl-tests prints it (`collective_counts`). The same factor
is applied to every algorithm of a collective, so busbw reads as "the bus bandwidth this time is
equivalent to" and numbers of different algorithms (and world sizes) compare directly.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

# The collectives, in the order tables, plots and `--collectives all` list them, by the names
# nccl-tests' programs (and `import`) give them.
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
# collectives measured in a second, in-place half besides the out-of-place one (`run --in-place`,
# nccl-tests' in-place columns); AllReduce, Broadcast and Reduce are in place already, AllToAll
# and SendRecv have no in-place mode. An in-place half's rows are benchmark <name>-in-place.
IN_PLACE_HALVES = ("all_gather", "reduce_scatter")
IN_PLACE = "-in-place"


def benchmark_of(collective: str, in_place: bool = False) -> str:
    """A row's `benchmark`: allreduce for AllReduce (what every AllReduce analysis reads), else
    the collective's name; `-in-place` marks an in-place half measured beside an out-of-place one
    (`run --in-place`, and `import` of a nccl-tests table with both columns)."""
    name = "allreduce" if collective == "all_reduce" else collective
    return name + IN_PLACE if in_place else name


def busbw_factor(world_size: int, collective: str = "all_reduce") -> float:
    """nccl-tests' busbw factor: for AllReduce 2(N-1)/N, the bytes each rank must send per byte
    of tensor in an optimal AllReduce."""
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
    """(count, size_bytes) of one measurement, as nccl-tests' GetCollByteCount sets them for a
    requested size: for AllGather, ReduceScatter and AllToAll `count` is one rank's part, cut
    down to whole 16-byte units (`(count / N) & ~(16 / eltSize - 1)`), and the size is N parts;
    for the others `count` is the whole buffer. The printed size is the larger buffer, the whole
    one, which is what algbw divides."""
    count = size_bytes // itemsize
    if collective not in PER_RANK:
        return count, count * itemsize
    per_rank = (count // world_size) & ~(max(1, 16 // itemsize) - 1)
    return per_rank, per_rank * world_size * itemsize


# A row is flagged `unstable` when its printed number (the median) cannot be trusted to within
# TRUSTED_TO either way: judged on what decides that, not on how much single samples vary (on a
# machine whose calls switch between a fast and a slow state they always vary, and a median of
# many samples can still be exact). Two things decide it:
# - the median's CONFIDENCE interval (distribution-free, from order statistics: `median_interval`)
#   reaches further than TRUSTED_TO from it: too few samples, or states split near half and half;
# - its interleaved rounds (--rounds) disagree: (max - min) / median of the per-round medians
#   (from 8 rounds on, the width of their median's interval: measure/rounds.py) above
#   ROUNDS_DISAGREE = 2 x TRUSTED_TO, i.e. no one number lies within TRUSTED_TO of every
#   round's, AND the rounds' samples differ by more than their own spread explains (Kruskal-
#   Wallis p < ROUNDS_ALPHA): the machine changed state between them. Without the test, a row
#   of 2 samples a round (a large size in the default run) was flagged by chance in a quarter
#   to a third of rows on a quiet machine; what those few samples leave uncertain is the
#   interval's to say.
TRUSTED_TO = 0.10
CONFIDENCE = 0.90
ROUNDS_DISAGREE = 2 * TRUSTED_TO
ROUNDS_ALPHA = 0.05
# Two states: sorted samples that split at one gap of more than STATE_GAP x (the next sample is
# 25% slower than the one before) into a fast and a slow group, each at least STATE_MIN_SHARE of
# the samples, whose medians are STATE_RATIO apart or more (gloo's slow state on a VM: 2-8 ms
# where the fast one takes 0.2 ms). A row with two states reports both medians and shares.
STATE_GAP = 1.25
STATE_MIN_SHARE = 0.10
STATE_RATIO = 1.5
NO_STATES = {"fast_us_median": math.nan, "fast_share": math.nan, "slow_us_median": math.nan,
             "slow_share": math.nan}


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high): the distribution-free confidence interval of the median, the order statistics
    x_(j) and x_(n+1-j) with the largest j whose coverage 1 - 2 P(Binomial(n, 1/2) < j) is at
    least `confidence` (the whole range where even it falls short: few samples)."""
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
    """{fast_us_median, fast_share, slow_us_median, slow_share} when the samples fall into a fast
    and a slow state (see STATE_GAP), NaNs otherwise. The split is at the widest gap, by ratio,
    that leaves at least STATE_MIN_SHARE of the samples on each side."""
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
    """The numbers of one row from its raw samples.

    `per_rank_us[r][s]` is rank r's time per call in sample s (the sample's clock interval over
    its `loops` calls). A collective is done when its slowest rank is, so each sample's time is
    the MAX over ranks; the median, mean, percentiles and spread are taken over those.

    `time_us_rank_mean` is the figure nccl-tests prints for the same data: each rank's mean time
    per call over all its calls, averaged over ranks (its default `-a 1`).

    `late_rank`: the rank that most often started a sample last. A rank that starts a sample late
    is waited for by the others inside the collective, so *it* measures the shortest interval and
    everyone else a longer one; per sample the late rank is therefore the one with the MINIMUM
    time (not the maximum, which names a rank that merely waited). `late_rank_share` is the
    share of samples in which it was the late one; `late_rank_lag_us` is the median over samples
    of how much later it started than the first rank: (max - min) per call x `loops`.

    `skew_share`: how much of a sample was the alignment's exit skew, (max - min) / max per
    sample (the late rank's lag over the slowest rank's interval), median over samples. The
    sample's time (the MAX) holds that much waiting for the late rank beside the calls.

    `time_us_ci_low`/`_high`: the median's CONFIDENCE interval; `unstable` when it reaches
    beyond TRUSTED_TO of the median (a row's rounds can flag it too: sweep/rows.py). `fast_*`
    and `slow_*`: the two states' medians and shares where the samples have two (`two_states`).
    """
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
