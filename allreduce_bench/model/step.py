"""The seed's model of a data-parallel training step: how much AllReduce hides behind compute
(doc/model.md works the seed's 7B example)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from allreduce_bench.core.config.checks import check_finite
from allreduce_bench.core.errors import UsageError
from allreduce_bench.model.cost import Links, allreduce_time, layout

DTYPE_BYTES = {"float32": 4, "fp32": 4, "tf32": 4, "bfloat16": 2, "bf16": 2, "float16": 2,
               "fp16": 2, "half": 2, "float64": 8, "fp64": 8, "fp8": 1, "float8": 1}
DEFAULT_BUCKET_BYTES = 25 * 2 ** 20  # DDP's bucket_cap_mb=25 (torch counts MiB)
DEFAULT_BACKWARD_SHARE = 2 / 3


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise UsageError(f"unknown gradient --dtype {dtype!r}; choose from "
                         f"{', '.join(DTYPE_BYTES)}") from None


def gradient_bytes(params: float, dtype: str) -> float:
    return params * dtype_bytes(dtype)


def traffic_bytes(gradient_bytes: float) -> float:
    """2 G: the ring's 2(N-1)/N G for large N."""
    return 2.0 * gradient_bytes


def buckets(gradient_bytes: float, bucket_bytes: float) -> tuple[int, float]:
    """(full buckets, bytes of the last, which may be full too)."""
    if bucket_bytes <= 0:
        raise UsageError("--bucket must be greater than zero")
    count = max(1, math.ceil(gradient_bytes / bucket_bytes))
    return count - 1, gradient_bytes - (count - 1) * bucket_bytes


@dataclass(frozen=True)
class TrainingStep:
    """The data-parallel step `model ddp` is given: gradients, compute, DDP's bucket, overlap."""

    params: float
    dtype: str
    compute_s: float
    bucket_bytes: float
    backward_share: float
    overlappable_s: float | None
    gradient_bytes: float
    buckets: int

    @property
    def overlap(self) -> dict:
        return {"backward_share": self.backward_share, "overlappable_s": self.overlappable_s}


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    comm_s: float
    last_bucket_s: float  # communication that cannot start before backward ends
    overlappable_s: float

    @property
    def exposed_s(self) -> float:
        return max(0.0, self.comm_s - self.overlappable_s)

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_s

    @property
    def efficiency(self) -> float:
        return self.compute_s / self.step_s

    @property
    def hidden(self) -> bool:
        """All communication but the unavoidable last bucket overlaps with backward."""
        return self.exposed_s <= self.last_bucket_s * (1 + 1e-9)


def check_backward_share(backward_share: float) -> None:
    check_finite(backward_share, "--backward-share", low=None)
    if not 0 <= backward_share <= 1:
        raise UsageError(f"--backward-share must be between 0 and 1, got {backward_share:g}")


def step_time(compute_s: float, comm_s: float, last_bucket_s: float,
              backward_share: float = DEFAULT_BACKWARD_SHARE,
              overlappable_s: float | None = None) -> StepTime:
    """Overlappable defaults to all but the last bucket's comm, bounded by backward (backward_share x compute)."""
    check_backward_share(backward_share)
    if overlappable_s is None:
        overlappable_s = min(backward_share * compute_s, comm_s - last_bucket_s)
    return StepTime(compute_s, comm_s, min(last_bucket_s, comm_s), min(overlappable_s, comm_s))


def seed_step(gradient_bytes: float, compute_s: float, bandwidth_Bps: float,
              bucket_bytes: float = DEFAULT_BUCKET_BYTES, **overlap) -> StepTime:
    """The seed's arithmetic: comm = 2 G / bandwidth, one link, any N."""
    _, last = buckets(gradient_bytes, bucket_bytes)
    return step_time(compute_s, traffic_bytes(gradient_bytes) / bandwidth_Bps,
                     traffic_bytes(last) / bandwidth_Bps, **overlap)


def bucketed_comm(gradient_bytes: float, bucket_bytes: float,
                  allreduce_s: Callable[[float], float]) -> tuple[float, float]:
    """(total, last bucket) seconds, each bucket its own AllReduce as in DDP."""
    full, last = buckets(gradient_bytes, bucket_bytes)
    last_s = allreduce_s(last)
    return full * (allreduce_s(bucket_bytes) if full else 0.0) + last_s, last_s


def weak_scaling(work: TrainingStep, gpu_counts: list[int], ranks_per_node: int, links: Links,
                 algorithm: str = "native", native_as: str = "ring") -> pd.DataFrame:
    """Efficiency against GPU count with fixed work per GPU: compute stays, comm follows the AllReduce model."""
    rows = []
    for gpus in gpu_counts:
        nodes, _ = layout(gpus, ranks_per_node)
        comm_s, last_s = bucketed_comm(
            work.gradient_bytes, work.bucket_bytes,
            lambda size: allreduce_time(algorithm, size, gpus, ranks_per_node, links, native_as))
        step = step_time(work.compute_s, comm_s, last_s, **work.overlap)
        rows.append({"gpus": gpus, "nodes": nodes, "comm_s": comm_s, "exposed_s": step.exposed_s,
                     "step_s": step.step_s, "efficiency": step.efficiency, "hidden": step.hidden})
    return pd.DataFrame(rows)


def parse_gpu_counts(text: str) -> list[int]:
    """'8,16,32' or '8,16,...,1024' (the ratio of the first two terms, up to the last)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    hint = "give GPU counts such as 8,16,32 or 8,16,...,1024"
    try:
        if "..." in parts:
            at = parts.index("...")
            if at < 2 or at != len(parts) - 2:
                raise UsageError(f"--gpus {text!r}: '...' needs two counts before it and one after; {hint}")
            head, last = [int(p) for p in parts[:at]], int(parts[-1])
            ratio = head[-1] / head[-2]
            if ratio != int(ratio) or ratio < 2:
                raise UsageError(f"--gpus {text!r}: '...' continues a series that multiplies by a "
                                 f"whole number (8,16,...); {hint}")
            counts = head
            while counts[-1] * int(ratio) <= last:
                counts.append(counts[-1] * int(ratio))
            if counts[-1] != last:
                raise UsageError(f"--gpus {text!r}: {last} is not in the series "
                                 f"{','.join(map(str, counts[:4]))},...; {hint}")
        else:
            counts = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--gpus {text!r} is not a list of whole numbers; {hint}") from None
    if not counts or min(counts) < 1:
        raise UsageError(f"--gpus {text!r}: counts must be at least 1; {hint}")
    return sorted(set(counts))
