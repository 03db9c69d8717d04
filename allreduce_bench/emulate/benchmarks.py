"""The benchmarks, registered by name as the algorithms are: each entry names the module whose
`BENCHMARK` (a measure.rank.Benchmark) declares it, imported on use (it imports torch), and the
CLI command that runs it (for `emulate --benchmarks`). Adding a benchmark is a module here, one
line below and one module in cli/."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from allreduce_bench.core.errors import UsageError


@dataclass(frozen=True)
class Entry:
    module: str
    command: str  # `allreduce-bench <command>` runs it
    config: str  # "module:function" that turns the command's options into its config
    # "module:function(out_dir, since) -> exit code or None": the benchmark's own verdict once
    # final (emulate passes it on instead of torchrun's 1 for any failure)
    outcome: str | None = None


REGISTRY: dict[str, Entry] = {
    "allreduce": Entry("allreduce_bench.core.sweep.allreduce", "run",
                       "allreduce_bench.core.config.run:run_config"),
    "links": Entry("allreduce_bench.links.benchmark", "links",
                   "allreduce_bench.core.config.run:links_config"),
    "ddp": Entry("allreduce_bench.ddp.benchmark", "ddp", "allreduce_bench.ddp.config:ddp_config"),
    "health": Entry("allreduce_bench.health.benchmark", "health",
                    "allreduce_bench.health.config:health_config", "allreduce_bench.health.store:outcome"),
}


def get(name: str):
    """The Benchmark declared under `name`."""
    try:
        entry = REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown benchmark {name!r}; choose from {', '.join(REGISTRY)}") from None
    return importlib.import_module(entry.module).BENCHMARK


def command_of(name: str) -> str:
    return REGISTRY[name].command


def config_of(name: str, **options):
    """The benchmark's config from its command's options (validated, one line on bad input)."""
    module, function = REGISTRY[name].config.split(":")
    return getattr(importlib.import_module(module), function)(**options)


def outcome_of(name: str):
    """The benchmark's outcome(out_dir, since) function, or None."""
    spec = REGISTRY[name].outcome
    if spec is None:
        return None
    module, function = spec.split(":")
    return getattr(importlib.import_module(module), function)
