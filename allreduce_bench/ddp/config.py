"""The validated configuration of `allreduce-bench ddp`: what each rank measures. No torch."""
from __future__ import annotations

import math
from dataclasses import dataclass

from allreduce_bench.core import units
from allreduce_bench.core.config.checks import Host, check_finite, check_memory
from allreduce_bench.core.config.launch import LaunchConfig, LaunchOptions, from_params
from allreduce_bench.core.environment import RankEnv, Started
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import Hooks, Runnable

# With --params 10M, a local CPU run at world sizes 2 and 4 on 2 idle cores takes about a minute.
CPU_DEFAULTS = dict(iters=5, warmup=1, batch_size=16)
GPU_DEFAULTS = dict(iters=20, warmup=5, batch_size=256)
# float32 copies of the parameters a rank holds: weights, gradients, DDP's buckets, AllReduce-alone's buffers
DDP_COPIES = 4


@dataclass(frozen=True)
class DdpSettings:
    """What each rank needs to know to measure."""

    params: int
    layers: int
    batch_size: int
    bucket_mbs: tuple[float, ...]
    accum: int
    iters: int
    warmup: int

    @property
    def gradient_bytes(self) -> int:
        """What DDP reduces per step: the float32 gradients of the model (ddp/net.py)."""
        width = layer_width(self.params, self.layers)
        return 4 * self.layers * (width * width + width)


def layer_width(params: int, layers: int) -> int:
    """Width w of `layers` square Linear layers (w*w weights + w biases each) closest to `params`."""
    per_layer = params / layers
    return max(1, round((math.sqrt(1 + 4 * per_layer) - 1) / 2))


# the rows measure_world records per world size: 8 measures per bucket cap, then accum_sync and accum_no_sync
ROWS_PER_BUCKET_CAP, ACCUMULATION_ROWS = 8, 2


@dataclass(frozen=True)
class DdpConfig:
    launch: LaunchConfig
    settings: DdpSettings


@dataclass(frozen=True)
class DdpOptions:
    """`ddp`'s options, as click parsed them."""

    launch: LaunchOptions
    params: str = "10M"
    layers: int = 8
    batch_size: int | None = None
    bucket_mb: str = "1,5,25,100"
    accum: int = 4
    iters: int | None = None
    warmup: int | None = None


def rows_expected(config: DdpConfig) -> int:
    """The rows the run records (its progress bar counts them)."""
    per_world = ROWS_PER_BUCKET_CAP * len(config.settings.bucket_mbs) + ACCUMULATION_ROWS
    return per_world * len(config.launch.world_sizes)


def parse_bucket_mbs(text: str) -> tuple[float, ...]:
    """'1,5,25,100' -> (1.0, 5.0, 25.0, 100.0): DDP bucket caps in MiB, as bucket_cap_mb takes."""
    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"--bucket-mb {text!r} must be comma-separated numbers of MiB, "
                         "e.g. 1,5,25,100") from None
    if not values or min(values) <= 0:
        raise UsageError(f"--bucket-mb {text!r} must list bucket caps greater than 0 MiB")
    for cap in values:
        check_finite(cap, "--bucket-mb")
    return tuple(dict.fromkeys(values))


def _at_least(name: str, value: int, low: int) -> int:
    if value < low:
        raise UsageError(f"{name} must be at least {low}, got {value}")
    return value


def ddp_settings(options: DdpOptions, device: str) -> DdpSettings:
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    params = units.parse_whole_count(options.params, "--params")
    layers = _at_least("--layers", options.layers, 1)
    if params < layers * 2:
        raise UsageError(f"--params {params} is too small for {layers} layers; give at least "
                         f"{layers * 2} or fewer --layers")
    batch_size, iters, warmup = options.batch_size, options.iters, options.warmup
    return DdpSettings(
        params=params, layers=layers,
        batch_size=_at_least("--batch-size", defaults["batch_size"] if batch_size is None
                             else batch_size, 1),
        bucket_mbs=parse_bucket_mbs(options.bucket_mb), accum=_at_least("--accum", options.accum, 1),
        iters=_at_least("--iters", iters if iters is not None else defaults["iters"], 1),
        warmup=_at_least("--warmup", warmup if warmup is not None else defaults["warmup"], 0))


def ddp_config(options: DdpOptions, started: Started, host: Host) -> DdpConfig:
    from allreduce_bench.core.config.run import launch_config, resolve_world

    world = resolve_world(options.launch, started.env, host)
    check_finite(options.launch.timeout_s, "--timeout")
    settings = ddp_settings(options, device=world[2])
    check_ddp_memory(settings.params, world[0], world[2], started.env)
    launch = launch_config(world, options.launch, started, label="ddp")
    return DdpConfig(launch=launch, settings=settings)


def emulated_ddp(params: dict, started: Started, host: Host, hooks: Hooks) -> DdpConfig:
    return ddp_config(from_params(DdpOptions, params), started, host)


def check_ddp_memory(params: int, world_sizes, device: str, env: RankEnv | None) -> None:
    per_rank = DDP_COPIES * 4 * params
    ranks_here = env.local_world_size if env is not None else max(world_sizes)
    check_memory(per_rank * ranks_here, per_rank, ranks_here,
                 f"--params {units.format_count(params)}", device,
                 "choose a smaller --params or fewer ranks")


# `emulate --benchmarks ddp` without these options: 96 MB of gradients in 4 default buckets, and a
# backward of a few hundred ms on a small CPU machine (doc/ddp.md).
RUNNABLE = Runnable("ddp", "ddp", emulated_ddp,
                    defaults=(("--params", "24M"), ("--layers", "24"), ("--batch-size", "256")))
