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


# A row is flagged unstable when its samples vary this much (coefficient of variation), or fall
# into two groups apart by more than GAP of the median (two modes: e.g. a noisy neighbour, or a
# transport that switches protocols), so a user sees "unstable" rather than a confident number.
UNSTABLE_CV = 0.10
TWO_MODES_GAP = 0.25
TWO_MODES_MIN_SHARE = 0.2
# ... or when its interleaved rounds (--rounds) disagree: (max - min) / median of the per-round
# medians above this. Rounds on a quiet machine agree within a few percent; 15% is another state.
ROUNDS_DISAGREE = 0.15


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

    `skew_share`: how much of a sample was the alignment's exit skew, (max - min) / max per
    sample (the late rank's lag over the slowest rank's interval), median over samples. The
    sample's time (the MAX) holds that much waiting for the late rank beside the calls.
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
        "time_us_p99": float(series.quantile(0.99)),
        "time_us_min": float(series.min()),
        "time_us_max": float(series.max()),
        "time_cv": cv,
        "unstable": bool(cv > UNSTABLE_CV or two_modes(slowest)),
        "time_us_rank_mean": float(times.mean(axis=1).mean()),
        "late_rank": rank,
        "late_rank_share": float(counts[rank] / times.shape[1]),
        "late_rank_lag_us": float(np.median(times.max(axis=0) - times.min(axis=0)) * loops),
        "skew_share": float(np.median(np.divide(slowest - times.min(axis=0), slowest,
                                                out=np.zeros_like(slowest), where=slowest > 0))),
    }
