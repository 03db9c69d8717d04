"""What each rank of `allreduce-bench ddp` measures: settings only, no torch."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DdpSettings:
    """What each rank needs to know to measure; the CLI's DdpConfig carries these."""

    params: int
    layers: int
    batch_size: int
    bucket_mbs: tuple[float, ...]
    accum: int
    iters: int
    warmup: int
