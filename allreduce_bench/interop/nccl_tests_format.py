"""How nccl-tests' hand-made JSON writer (src/util.cu of 2.19.6, version 3) spells values and
computes its per-iteration statistics, for the exporter to write what it would have written:
one line, doubles as `%lf`, booleans as strings, `/` escaped; p50 the upper median, p95/p99 by
nearest rank, the population standard deviation."""
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
# each program's redop and root for TimeTest (src/<collective>.cu): else "none", and root -1
REDOPS = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum", "sendrecv": "sum"}
ROOTED = ("broadcast", "reduce")


def encode(value) -> str:
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
    """`<half>_per_iter`'s summary of `times_us`, in the writer's key order."""
    ordered = sorted(float(t) for t in times_us)
    n = len(ordered)
    avg = sum(ordered) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in ordered) / n)
    return {"skipped_iterations": 0, "min_us": ordered[0], "max_us": ordered[-1], "avg_us": avg,
            "p50_us": ordered[n // 2], "p95_us": ordered[_nearest_rank(n, 95)],
            "p99_us": ordered[_nearest_rank(n, 99)], "stdev_us": stdev,
            "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0}


def root_name(root: int) -> str:
    """sprintf("%6i", root), as the writer stores it."""
    return f"{root:6d}"


def program(collective: str) -> str:
    return f"{collective}_perf"
