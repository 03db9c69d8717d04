"""What each rank of `allreduce-bench health` needs besides the shared measuring options; no torch."""
from __future__ import annotations

from dataclasses import dataclass, field

from allreduce_bench.config import RunConfig
from allreduce_bench.errors import UsageError

PAIRS = ("quick", "all")
CPU_SIZES = (4 << 10, 4 << 20)  # a latency size and a bandwidth size gloo moves in ~0.1 s emulated
GPU_SIZES = (8 << 10, 256 << 20)  # 256 MiB: near-peak busbw on 400 Gb/s rails


@dataclass(frozen=True)
class HealthSettings:
    pairs: str = "quick"
    bisect: bool = False
    expect: dict = field(default_factory=dict)  # check -> GB/s (reference.parse_expect)
    baseline: tuple = ()  # threshold rows of an earlier health.json
    prometheus: str | None = None  # the textfile to write, on the coordinator


@dataclass(frozen=True)
class HealthConfig(RunConfig):
    settings: HealthSettings = field(default_factory=HealthSettings)


def parse_pairs(text: str) -> str:
    if text not in PAIRS:
        raise UsageError(f"--pairs {text!r}: choose quick (one matching, then re-pairing the slow) "
                         "or all (every pair, N-1 rounds)")
    return text


def health_settings(*, pairs: str, bisect: bool, expect: str | None, baseline, prometheus,
                    ranks_per_node: int, sizes) -> HealthSettings:
    """Validated settings; a --baseline of another layout is refused here, before any process."""
    from allreduce_bench.analysis.health.outputs import baseline_thresholds
    from allreduce_bench.analysis.health.reference import parse_expect
    from allreduce_bench.results.health import read_health

    rows = ()
    if baseline is not None:
        rows = tuple(baseline_thresholds(read_health(baseline), ranks_per_node, sizes, baseline))
    return HealthSettings(parse_pairs(pairs), bisect, parse_expect(expect), rows,
                          None if prometheus is None else str(prometheus))
