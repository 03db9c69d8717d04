"""`allreduce-bench health`'s configuration: the shared launch options, the sizes and sampling
each check measures, and the health settings (pairing, thresholds, outputs). No torch."""
from __future__ import annotations

from dataclasses import dataclass, field

from allreduce_bench.core.config import CPU_DEFAULTS, GPU_DEFAULTS, RunConfig, parse_dtype, resolve_sampling
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.extensions import Runnable
from allreduce_bench.core.units import parse_size_list
from allreduce_bench.health.store import outcome

PAIRS = ("quick", "all")
# a latency size and a bandwidth size: 4 MiB crosses the emulator's default link in ~0.1 s
CPU_SIZES = (4 << 10, 4 << 20)
GPU_SIZES = (8 << 10, 256 << 20)  # 256 MiB: near-peak busbw on 400 Gb/s rails


@dataclass(frozen=True)
class HealthSettings:
    pairs: str = "quick"
    bisect: bool = False
    expect: dict = field(default_factory=dict)  # check -> GB/s (reference.parse_expect)
    baseline: tuple = ()  # threshold rows of an earlier health.json
    prometheus: str | None = None  # the textfile the coordinator writes


@dataclass(frozen=True)
class HealthConfig(RunConfig):
    """`health`: what `run` carries (the backend's AllReduce only) and the health settings."""

    settings: HealthSettings = field(default_factory=HealthSettings)


def parse_pairs(text: str) -> str:
    if text not in PAIRS:
        raise UsageError(f"--pairs {text!r}: choose quick (one matching, then re-pairing the slow "
                         "with known-good hosts) or all (every pair, N-1 rounds)")
    return text


def health_settings(*, pairs: str, bisect: bool, expect: str | None, baseline, prometheus,
                    ranks_per_node: int, sizes) -> HealthSettings:
    """Validated settings; a --baseline of another layout is refused here, before any process."""
    from allreduce_bench.health.outputs import baseline_thresholds
    from allreduce_bench.health.reference import parse_expect
    from allreduce_bench.health.store import read_health

    rows = ()
    if baseline is not None:
        rows = tuple(baseline_thresholds(read_health(baseline), ranks_per_node, sizes, baseline))
    return HealthSettings(parse_pairs(pairs), bisect, parse_expect(expect), rows,
                          None if prometheus is None else str(prometheus))


def local_world(hosts: int | None, world_sizes: str | None, ranks_per_node: int,
                env) -> str | None:
    """The one world a local run starts (--hosts x ranks per host); None under a launcher
    (`env`, the launcher's layout)."""
    if world_sizes is not None:
        raise UsageError("health measures one world: give --hosts N (simulated hosts of "
                         "--ranks-per-node ranks), not --world-sizes")
    if hosts is not None and hosts < 1:
        raise UsageError(f"--hosts must be at least 1, got {hosts}")
    if env is not None:
        return None
    return str((hosts or 2) * ranks_per_node)


def health_sampling(device: str, samples, budget):
    """The sampling of `run`'s defaults for the device, with --samples / --budget."""
    return resolve_sampling((GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS)["sampling"], None,
                            samples, budget, None, False)


def health_sizes(sizes: str | None, device: str) -> tuple[int, ...]:
    return tuple(sorted(parse_size_list(sizes))) if sizes else GPU_SIZES if device == "cuda" else CPU_SIZES


def health_config(*, hosts=None, pairs="quick", bisect=False, expect=None, baseline=None,
                  prometheus=None, sizes=None, dtype="float32", samples=None, budget=None,
                  world_sizes=None, backend, device, ranks_per_node, tag, out_dir, timeout_s,
                  no_plot, command="", dry_run=False, nccl_debug=False, bind="auto",
                  flight_recorder=False, started, host: Host) -> HealthConfig:
    from allreduce_bench.core.config.run import launch_config, resolve_world

    if dry_run:
        raise UsageError("--dry-run plans without starting anything: run `allreduce-bench health "
                         "--dry-run --hosts N` on its own")
    env = started.env
    per_host = ranks_per_node or (env.local_world_size if env else CPU_DEFAULTS["ranks_per_node"])
    world = resolve_world(local_world(hosts, world_sizes, per_host, env), backend, device, per_host,
                          env, host)
    chosen = health_sizes(sizes, world[2])
    settings = health_settings(pairs=pairs, bisect=bisect, expect=expect, baseline=baseline,
                               prometheus=prometheus, ranks_per_node=per_host, sizes=chosen)
    launch = launch_config(world, started, tag=tag, out_dir=out_dir, timeout_s=timeout_s, no_plot=no_plot,
                           command=command, label="health", nccl_debug=nccl_debug, bind=bind,
                           flight_recorder=flight_recorder)
    return HealthConfig(launch=launch, algorithms=("native",), sizes=chosen, dtype=parse_dtype(dtype),
                        sampling=health_sampling(world[2], samples, budget), settings=settings)


RUNNABLE = Runnable("health", "health", health_config, outcome)  # its own exit code: 0/3/1
