"""What `emulate --benchmarks` can run on the emulated hosts: per benchmark, the command each
host runs, the function that turns the command's options into its config (validated up front,
one line on bad input, no torch) and, where the benchmark has one, its own verdict once final
(emulate passes it on instead of torchrun's 1 for any failure, and writes it itself when the
ranks could not). The entries are the features'
own callables, so the import graph sees every edge (doc/architecture.md)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from allreduce_bench.core.config.run import run_config
from allreduce_bench.core.errors import UsageError
from allreduce_bench.ddp.config import ddp_config
from allreduce_bench.health.config import health_config
from allreduce_bench.health.salvage import Watch as HealthWatch
from allreduce_bench.links.config import links_config


@dataclass(frozen=True)
class Entry:
    command: str  # `allreduce-bench <command>` runs it
    config: Callable  # the command's options -> its config
    # (out_dir, since, config) -> the watch over its launches (emulate/processes.py), where
    # the benchmark has its own: health's verdict survives a host lost, and is its exit code
    watch: Callable | None = None


REGISTRY: dict[str, Entry] = {
    "allreduce": Entry("run", run_config),
    "links": Entry("links", links_config),
    "ddp": Entry("ddp", ddp_config),
    "health": Entry("health", health_config, HealthWatch),
}


def entry(name: str) -> Entry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown benchmark {name!r}; choose from {', '.join(REGISTRY)}") from None
