"""Bandwidth definitions and timing statistics: plain functions of numbers.

algbw = size_bytes / time and busbw = algbw * 2(N-1)/N, in decimal GB/s, exactly as
nccl-tests' doc/PERFORMANCE.md defines them for AllReduce. The same factor is applied to every
algorithm, so busbw reads as "the ring bandwidth this time is equivalent to" and numbers of
different algorithms (and world sizes) compare directly.
"""
from __future__ import annotations

from collections.abc import Sequence

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


def time_stats(times_us: Sequence[float]) -> dict[str, float]:
    """Median, mean, p95, min and max of per-iteration times (already the slowest rank's)."""
    series = pd.Series(list(times_us), dtype="float64")
    if series.empty:
        raise ValueError("no timed iterations")
    return {
        "time_us_median": float(series.median()),
        "time_us_mean": float(series.mean()),
        "time_us_p95": float(series.quantile(0.95)),
        "time_us_min": float(series.min()),
        "time_us_max": float(series.max()),
    }
