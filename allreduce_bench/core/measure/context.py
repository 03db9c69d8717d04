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
    """What a benchmark declares, each a module-level function of its own config (spawned ranks
    receive the declaration by reference).

    On every rank `measure(session) -> #wrong`, rows through `session.record`; `meta(config)`:
    the meta.json a new run starts with. On the writer (the local driver, or rank 0 under a
    launcher): `prepare(config)` before any rank starts, `world_sizes(config)` the local worlds
    still to start (None: every world size). `resumable`: a stopped run says how to continue it.
    `joins_present`: its world is made of the ranks that arrive in --timeout, not of all
    launched. `salvage(run, {rank: exit code}, since) -> exit code`: the local driver's verdict
    from what survived a rank's death, instead of its one line. `rows(config)`: the rows a run
    records, where known ahead (its progress bar counts them)."""

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
    """What a local world's driver hands each rank it starts: the folder where ranks leave
    their reasons and marks, and its own pid (the rank dies with it)."""

    reasons: str
    driver_pid: int


@dataclass(frozen=True)
class Run:
    """One run: its command's config, what its ranks measure, and the features' hooks. `kept`:
    what a benchmark's rank hands its command's finish in the same process (health's board,
    held open for the confirmation at the end); each process has its own."""

    config: Any  # the command's own config (a Measuring)
    benchmark: Benchmark
    hooks: Hooks
    kept: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def launch(self) -> LaunchConfig:
        return self.config.launch
