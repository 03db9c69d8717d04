"""Interleaved rounds (`--rounds R`): a change of the machine's state spreads over every size (doc/methodology.md)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from allreduce_bench.core.metrics import ROUNDS_ALPHA, ROUNDS_DISAGREE, median_interval

Item = TypeVar("Item")


def order(items: Sequence[Item], rounds: int) -> list[tuple[int, Item]]:
    """(round, item) to measure: passes alternate direction, the last forward (rows in `items`' order)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    planned: list[tuple[int, Item]] = []
    for index in range(rounds):
        forward = (rounds - 1 - index) % 2 == 0
        planned.extend((index, item) for item in (items if forward else items[::-1]))
    return planned


def round_sampling(sampling, rounds: int, index: int, first=None):
    """Round `index`'s sampling: the budget split; after the first round its loops and samples."""
    if rounds == 1:
        return sampling
    share = {"budget_s": sampling.budget_s / rounds,
             "min_samples": max(2, math.ceil(sampling.min_samples / rounds)),
             "max_samples": max(2, math.ceil(sampling.max_samples / rounds))}
    if index > 0 and first is not None:
        share.update(loops=first.loops, samples=first.samples, warmup=max(1, sampling.warmup))
    if sampling.samples is not None:  # --samples N is the total: N // R each, the rest first
        share["samples"] = max(1, sampling.samples // rounds + (index < sampling.samples % rounds))
    return replace(sampling, **share)


def pooled(per_round: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    ranks = len(per_round[0])
    return [[t for one in per_round for t in one[rank]] for rank in range(ranks)]


def _slowest(one) -> np.ndarray:
    return np.max(np.asarray(one, dtype=float), axis=0)


def round_spread(per_round: Sequence[Sequence[Sequence[float]]]) -> float:
    """(high - low) / median of the per-round medians' confidence interval; 0 with one round."""
    medians = np.array([np.median(_slowest(one)) for one in per_round])
    if len(medians) < 2:
        return 0.0
    low, high = median_interval(medians.tolist())
    return float((high - low) / np.median(medians))


def round_p(per_round: Sequence[Sequence[Sequence[float]]]) -> float:
    """Kruskal-Wallis p that the rounds' samples come from one distribution (nan where undefined)."""
    from scipy.stats import kruskal

    groups = [_slowest(one) for one in per_round]
    if len(groups) < 2 or np.ptp(np.concatenate(groups)) == 0:
        return math.nan
    return float(kruskal(*groups).pvalue)


def round_columns(per_round: Sequence[Sequence[Sequence[float]]]) -> dict:
    """A row's round columns: how many, their medians' spread, and whether they disagree."""
    spread = round_spread(per_round)
    p = round_p(per_round) if spread > ROUNDS_DISAGREE else math.nan
    return {"rounds": len(per_round), "round_spread": spread, "round_p": p,
            "rounds_disagree": bool(spread > ROUNDS_DISAGREE and p < ROUNDS_ALPHA)}
