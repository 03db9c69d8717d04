"""`allreduce-bench health`'s configuration: the shared launch options, the sizes and sampling
each check measures, and the health settings (pairing, thresholds, outputs). No torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from allreduce_bench.core.config import CPU_DEFAULTS, DTYPES, GPU_DEFAULTS, Sampling, parse_dtype, resolve_sampling
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.config.launch import LaunchConfig, LaunchOptions, from_params
from allreduce_bench.core.environment import Started
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import Hooks, Runnable
from allreduce_bench.core.units import parse_size_list
from allreduce_bench.health.salvage import Watch

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
class HealthConfig:
    """`health`: where it launches, the sizes and sampling each check measures (the backend's
    AllReduce), and the health settings."""

    launch: LaunchConfig
    sizes: tuple[int, ...]
    dtype: str
    sampling: Sampling
    settings: HealthSettings = field(default_factory=HealthSettings)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class HealthOptions:
    """`health`'s options, as click parsed them."""

    launch: LaunchOptions
    hosts: int | None = None
    pairs: str = "quick"
    bisect: bool = False
    expect: str | None = None
    baseline: Path | None = None
    prometheus: Path | None = None
    sizes: str | None = None
    dtype: str = "float32"
    samples: int | None = None
    budget: float | None = None
    dry_run: bool = False


def parse_pairs(text: str) -> str:
    if text not in PAIRS:
        raise UsageError(f"--pairs {text!r}: choose quick (one matching, then re-pairing the slow "
                         "with known-good hosts) or all (every pair, N-1 rounds)")
    return text


def health_settings(options: HealthOptions, ranks_per_node: int, sizes: tuple[int, ...]) -> HealthSettings:
    """Validated settings; a --baseline of another layout is refused here, before any process."""
    from allreduce_bench.health.outputs import baseline_thresholds
    from allreduce_bench.health.reference import parse_expect
    from allreduce_bench.health.store import read_health

    rows: tuple[dict, ...] = ()
    if options.baseline is not None:
        rows = tuple(baseline_thresholds(read_health(options.baseline), ranks_per_node, sizes,
                                         options.baseline))
    return HealthSettings(parse_pairs(options.pairs), options.bisect, parse_expect(options.expect),
                          rows, None if options.prometheus is None else str(options.prometheus))


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


def health_config(options: HealthOptions, started: Started, host: Host) -> HealthConfig:
    from dataclasses import replace

    from allreduce_bench.core.config.run import launch_config, resolve_world

    if options.dry_run:
        raise UsageError("--dry-run plans without starting anything: run `allreduce-bench health "
                         "--dry-run --hosts N` on its own")
    env, launch = started.env, options.launch
    per_host = launch.ranks_per_node or (env.local_world_size if env else CPU_DEFAULTS["ranks_per_node"])
    world_sizes = local_world(options.hosts, launch.world_sizes, per_host, env)
    world = resolve_world(replace(launch, world_sizes=world_sizes, ranks_per_node=per_host), env, host)
    chosen = health_sizes(options.sizes, world[2])
    settings = health_settings(options, ranks_per_node=per_host, sizes=chosen)
    return HealthConfig(launch=launch_config(world, launch, started, label="health"),
                        sizes=chosen, dtype=parse_dtype(options.dtype),
                        sampling=health_sampling(world[2], options.samples, options.budget),
                        settings=settings)


def emulated_health(params: dict, started: Started, host: Host, hooks: Hooks) -> HealthConfig:
    return health_config(from_params(HealthOptions, params), started, host)


RUNNABLE = Runnable("health", "health", emulated_health, Watch)  # its own exit code: 0/3/1
