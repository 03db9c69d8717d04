"""The interleaved passes every sweep runs (measure/rounds.py): calibrated in the first, checked in the last,
rows pooled from all; rows not yet trusted get extra rounds within --extra-budget."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, cast

import numpy as np
import pandas as pd

from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import rounds, timing
from allreduce_bench.core.measure.world import World


@dataclass(frozen=True)
class Item:

    label: str  # as progress, the console and resume name it (collectives.label)
    size_bytes: int
    # (this round's sampling, check the result?) -> (samples, #wrong summed over ranks)
    measure: Callable[[timing.Sampling, bool], tuple[timing.Measured, int]]
    # (every round's samples, #wrong) -> (the row, its raw samples)
    row: Callable[[list[timing.Measured], int], tuple[dict, pd.DataFrame]]


class Phase(Protocol):
    """What a sweep reports to."""

    def wanted(self, label: str, size_bytes: int) -> bool:
        """False to skip a measurement (a resumed run's finished row); the same on every rank."""

    def measuring(self, label: str, size_bytes: int, round_index: int) -> None:
        """Before every measurement (progress)."""

    def record(self, label: str, row: dict, samples: pd.DataFrame) -> None:
        """A row is done: after its last round, or the extra round that settles it."""

    def settled(self, label: str, world: World) -> None:
        """Every row of `label` is done (its table can be shown)."""


def run(config: RunConfig, world: World, items: list[Item], phase: Phase) -> int:
    """Measure `items` in the rounds' order, recording each row after its last round (or its extra rounds);
    the number of wrong elements summed."""
    wrong_total, last = 0, config.rounds - 1
    skipped, unsettled = set(), []
    taken: dict[tuple[str, int], list] = {}
    left = Counter(item.label for item in items)  # rows still to come, per label

    def emit(item: Item, row_and_samples: tuple[dict, pd.DataFrame] | None) -> None:
        if row_and_samples is not None:
            phase.record(item.label, *row_and_samples)
        left[item.label] -= 1
        if not left[item.label]:
            phase.settled(item.label, world)

    def measure(item: Item, index: int, check: bool) -> tuple[timing.Measured, int]:
        phase.measuring(item.label, item.size_bytes, index)
        earlier = taken.setdefault((item.label, item.size_bytes), [])
        sampling = rounds.round_sampling(config.sampling, config.rounds, index,
                                         earlier[0] if earlier else None)
        measured, wrong = item.measure(sampling, check)
        earlier.append(held(measured, world.rank == 0))
        return measured, wrong

    for index, item in rounds.order(items, config.rounds):
        key = (item.label, item.size_bytes)
        if key in skipped:
            continue
        if not phase.wanted(item.label, item.size_bytes):
            skipped.add(key)
            emit(item, None)
            continue
        _, wrong = measure(item, index, index == last)
        if index == last:
            wrong_total += wrong
            done = item.row(taken[key], wrong)
            if done[0]["unstable"] and extra_share(config) > 0:
                unsettled.append((item, wrong))
            else:
                emit(item, done)
                del taken[key]
    extra_rounds(config, unsettled, taken, measure, emit)
    return wrong_total


def extra_rounds(config: RunConfig, unsettled: list[tuple[Item, int]], taken: dict,
                 measure: Callable, emit: Callable) -> None:
    """Extra alternating rounds for rows flagged `unstable`, each leaving once settled, until this sweep's
    share of --extra-budget is spent (the same on every rank); the rest are emitted flagged."""
    spent, budget, index = 0.0, extra_share(config), config.rounds
    while unsettled and spent < budget:
        order = unsettled if (index - config.rounds) % 2 else unsettled[::-1]
        for item, wrong in list(order):
            if spent >= budget:
                break
            measured, _ = measure(item, index, False)
            spent += max(config.sampling.budget_s / config.rounds, calls_s(measured, config.sampling.warmup))
            done = item.row(taken[(item.label, item.size_bytes)], wrong)
            if not done[0]["unstable"]:
                unsettled.remove((item, wrong))
                emit(item, done)
        index += 1
    for item, wrong in unsettled:
        emit(item, item.row(taken[(item.label, item.size_bytes)], wrong))


def held(measured: timing.Measured, writer: bool) -> timing.Measured:
    """What a rank keeps of a round until its row is made (issue 53: every rank held every
    rank's samples of every row in flight, N x rounds x rows as Python floats on each of N ranks).
    The writer: every rank's samples, as one float64 array (8 B a sample, a Python float's list
    slot takes 32). The others: the slowest rank's time per sample alone, all that decides a
    row's `unstable` and its extra rounds alike on every rank (metrics.sample_stats,
    rounds.round_columns, calls_s)."""
    times = np.asarray(measured.per_rank_us, dtype=float)
    return replace(measured, per_rank_us=cast(list, times if writer else times.max(axis=0, keepdims=True)))


def calls_s(measured: timing.Measured, warmup: int) -> float:
    """Seconds one measurement's calls took, by its slowest rank's median."""
    per_call_us = float(np.median(np.max(np.asarray(measured.per_rank_us, dtype=float), axis=0)))
    return per_call_us * 1e-6 * (measured.samples * measured.loops + warmup)


def extra_share(config: RunConfig) -> float:
    """This sweep's share of --extra-budget (none where --samples fixed the total)."""
    if config.sampling.samples is not None:
        return 0.0
    sweeps = len(config.launch.world_sizes) * (bool(config.algorithms) + len(config.collectives))
    return config.extra_budget_s / max(1, sweeps)
