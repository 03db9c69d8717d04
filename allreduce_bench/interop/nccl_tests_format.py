"""How nccl-tests' JSON writer (src/util.cu of nccl-tests 2.19.6, JSON_FILE_VERSION 3) spells its
values, and its per-iteration statistics, for the exporter to write what it would have written.

The writer is a hand-made state machine, not a JSON library: the document is one line without
spaces or a final newline; every double is printf's `%lf` (six decimals; NaN as the string
"nan"); booleans are the strings "true" and "false"; `/` in strings is escaped as `\\/`.
`computeIterStats` sorts the samples and takes min, max, p50 = sorted[n/2] (the upper median),
p95 and p99 by nearest rank (index min(n-1, ceil(n*p/100)-1)), the mean and the population
standard deviation (divided by n); cv_pct = stdev/avg*100, 0 when avg is 0.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

VERSION = 3  # JSON_FILE_VERSION of nccl-tests 2.19.6
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # TIME_STRING_FORMAT of start_time and end_time
# the project's dtype -> nccl-tests' type name (src/common.cu test_typenames)
TYPE_NAMES = {"int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32",
              "int64": "int64", "uint64": "uint64", "float16": "half", "float32": "float",
              "float64": "double", "bfloat16": "bfloat16", "float8_e4m3": "f8e4m3",
              "float8_e5m2": "f8e5m2"}
# what each program passes to TimeTest as redop and root (src/<collective>.cu, default -o sum):
# "none" for AllGather, AllToAll and Broadcast; root -1 but for Broadcast and Reduce (-r 0)
REDOPS = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum", "sendrecv": "sum"}
ROOTED = ("broadcast", "reduce")


def encode(value) -> str:
    """`value` as the writer prints it: dicts and lists compact, int as %d, float as %lf."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # the writer's jsonBool prints a string
        return '"true"' if value else '"false"'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6f}" if math.isfinite(value) else '"nan"'
    if isinstance(value, str):
        return json.dumps(value).replace("/", "\\/")
    if isinstance(value, dict):
        return "{" + ",".join(f"{encode(str(k))}:{encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as nccl-tests JSON")


def _nearest_rank(n: int, percentile: int) -> int:
    return min(n - 1, (n * percentile + 99) // 100 - 1)


def iter_stats(times_us: Sequence[float]) -> dict:
    """`<half>_per_iter`'s summary of `times_us` (none skipped), in the writer's key order."""
    ordered = sorted(float(t) for t in times_us)
    n = len(ordered)
    avg = sum(ordered) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in ordered) / n)
    return {"skipped_iterations": 0, "min_us": ordered[0], "max_us": ordered[-1], "avg_us": avg,
            "p50_us": ordered[n // 2], "p95_us": ordered[_nearest_rank(n, 95)],
            "p99_us": ordered[_nearest_rank(n, 99)], "stdev_us": stdev,
            "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0}


def root_name(root: int) -> str:
    """sprintf("%6i", root): the root as the writer stores it, a right-aligned string."""
    return f"{root:6d}"


def program(collective: str) -> str:
    """The nccl-tests program that measures `collective`."""
    return f"{collective}_perf"
