"""A run's context: built once by its command, handed to the driver, every rank and `finish`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from allreduce_bench.core.config.launch import LaunchConfig
from allreduce_bench.core.hooks import Hooks


class Measuring(Protocol):
    """A measuring command's config: its own fields beside the shared `launch`."""

    @property
    def launch(self) -> LaunchConfig: ...


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark declares, module-level functions of its config (ranks get them by reference): on every rank
    `measure(session) -> #wrong` and `meta`; on the writer `prepare`, `world_sizes` (None: all), `salvage` (a local
    run's verdict after a rank died), `rows` (for the bar); `joins_present`: a world of the ranks that arrive."""

    name: str
    meta: Callable[[Any], dict]
    measure: Callable[[Any], int]
    prepare: Callable[[Any], None] | None = None
    world_sizes: Callable[[Any], list[int]] | None = None
    resumable: bool = False
    joins_present: bool = False
    salvage: Callable[..., int] | None = None
    rows: Callable[[Any], int] | None = None


@dataclass(frozen=True)
class LocalRun:
    """What a local world's driver hands each rank: its reasons folder and its pid (the rank dies with it)."""

    reasons: str
    driver_pid: int


@dataclass(frozen=True)
class Run:
    """One run: its command's config, what its ranks measure, the hooks, and what a rank `kept` for finish."""

    config: Any  # the command's own config (a Measuring)
    benchmark: Benchmark
    hooks: Hooks
    kept: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def launch(self) -> LaunchConfig:
        return self.config.launch
