"""The interleaved passes every sweep runs (AllReduce's and the other collectives'): each
measurement in `config.rounds` passes that alternate direction (measure/rounds.py), calibrated
and planned in the first, checked in the last, its row pooled from all of them.

A sweep hands over its measurements as `Item`s: what resume and progress call it, how to
measure it once, and how to make its row from its rounds."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import rounds, timing
from allreduce_bench.core.measure.world import World


@dataclass(frozen=True)
class Item:
    """One measurement of a sweep."""

    label: str  # as progress, the console and resume name it (collectives.label)
    size_bytes: int
    # (this round's sampling, check the result?) -> (samples, #wrong summed over ranks)
    measure: Callable[[timing.Sampling, bool], tuple[timing.Measured, int]]
    # (every round's samples, #wrong) -> (the row, its raw samples)
    row: Callable[[list[timing.Measured], int], tuple[dict, pd.DataFrame]]


def run(config: RunConfig, world: World, items: list[Item], on_row: Callable[..., None],
        on_algorithm: Callable[[str, World], None],
        should_measure: Callable[[str, int], bool],
        on_measure: Callable[[str, int, int], None] = lambda label, size, index: None) -> int:
    """Measure `items` in the rounds' order; `on_algorithm(label, world)` before a label's
    first row and `on_row(row, samples)` after each row's last round (rows come in the order
    of `items`); `on_measure(label, size_bytes, round)` before every measurement (progress).
    `should_measure(label, size_bytes)` returns False to skip an item (a resumed run's
    finished rows), asked once and remembered. #wrong summed over the rows."""
    wrong_total, last = 0, config.rounds - 1
    skipped, taken, current = set(), dict[tuple[str, int], list](), None
    for index, item in rounds.order(items, config.rounds):
        key = (item.label, item.size_bytes)
        if key in skipped or not should_measure(item.label, item.size_bytes):
            skipped.add(key)
            continue
        if index == last and item.label != current:  # the rows come in the last pass
            on_algorithm(item.label, world)
            current = item.label
        on_measure(item.label, item.size_bytes, index)
        earlier = taken.setdefault(key, [])
        sampling = rounds.round_sampling(config.sampling, config.rounds, index,
                                         earlier[0] if earlier else None)
        measured, wrong = item.measure(sampling, index == last)
        earlier.append(measured)
        if index == last:
            wrong_total += wrong
            on_row(*item.row(taken.pop(key), wrong))
    return wrong_total
