"""Bandwidth definitions and timing statistics: plain functions of numbers (no torch).

algbw = size_bytes / time and busbw = algbw * 2(N-1)/N, in decimal GB/s, exactly as
nccl-tests' doc/PERFORMANCE.md defines them for AllReduce. The same factor is applied to every
algorithm, so busbw reads as "the ring bandwidth this time is equivalent to" and numbers of
different algorithms (and world sizes) compare directly.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd


def busbw_factor(world_size: int) -> float:
    """2(N-1)/N: the bytes each rank must send per byte of tensor in an optimal AllReduce."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return 2.0 * (world_size - 1) / world_size


def algbw_GBps(size_bytes: float, time_us: float) -> float:
    return size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else float("nan")


def busbw_GBps(size_bytes: float, time_us: float, world_size: int) -> float:
    return algbw_GBps(size_bytes, time_us) * busbw_factor(world_size)


# A row is flagged unstable when its samples vary this much (coefficient of variation), or fall
# into two groups apart by more than GAP of the median (two modes: e.g. a noisy neighbour, or a
# transport that switches protocols), so a user sees "unstable" rather than a confident number.
UNSTABLE_CV = 0.10
TWO_MODES_GAP = 0.25
TWO_MODES_MIN_SHARE = 0.2


def two_modes(values: Sequence[float]) -> bool:
    """True when the sorted samples split at one gap wider than TWO_MODES_GAP x median into two
    groups of at least TWO_MODES_MIN_SHARE of the samples each."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n < 5:
        return False
    lo = max(1, math.ceil(TWO_MODES_MIN_SHARE * n))
    gaps = np.diff(x)[lo - 1:n - lo]  # only splits leaving >= lo samples on each side
    return bool(len(gaps)) and float(gaps.max()) > TWO_MODES_GAP * float(np.median(x))


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
    """
    times = np.asarray(per_rank_us, dtype=float)
    if times.ndim != 2 or times.size == 0:
        raise ValueError("no samples")
    slowest = times.max(axis=0)
    series = pd.Series(slowest)
    mean = float(series.mean())
    cv = float(series.std(ddof=0) / mean) if mean > 0 else math.nan
    late = times.argmin(axis=0)
    counts = np.bincount(late, minlength=times.shape[0])
    rank = int(counts.argmax())
    return {
        "time_us_median": float(series.median()),
        "time_us_mean": mean,
        "time_us_p5": float(series.quantile(0.05)),
        "time_us_p95": float(series.quantile(0.95)),
        "time_us_min": float(series.min()),
        "time_us_max": float(series.max()),
        "time_cv": cv,
        "unstable": bool(cv > UNSTABLE_CV or two_modes(slowest)),
        "time_us_rank_mean": float(times.mean(axis=1).mean()),
        "late_rank": rank,
        "late_rank_share": float(counts[rank] / times.shape[1]),
        "late_rank_lag_us": float(np.median(times.max(axis=0) - times.min(axis=0)) * loops),
    }
