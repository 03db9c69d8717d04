"""Interleaved rounds (`--rounds R`): the sweep as R passes over (algorithm, size).

Each size given its budget in one go sees one state of the machine: a neighbour's burst, a
migration, a frequency step lands on one size and reads as a property of it. R passes in
alternating directions (the last one forward), each with budget / R, spread every measurement
over the run and put the sizes measured first in one pass last in the next. A row pools its
rounds' samples; the spread of the per-round medians (the width of their median's interval)
says how much the run disagrees with itself, and `unstable` fires when it exceeds
ROUNDS_DISAGREE and the rounds' samples differ significantly (metrics.py). Pure: plain values in, plain values out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from allreduce_bench.core.metrics import ROUNDS_ALPHA, ROUNDS_DISAGREE, median_interval

Item = TypeVar("Item")


def order(items: Sequence[Item], rounds: int) -> list[tuple[int, Item]]:
    """(round, item) in the order to measure: passes alternate direction and the last one runs
    forward, so rows (written in the last pass) come in the order of `items`."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    planned: list[tuple[int, Item]] = []
    for index in range(rounds):
        forward = (rounds - 1 - index) % 2 == 0
        planned.extend((index, item) for item in (items if forward else items[::-1]))
    return planned


def round_sampling(sampling, rounds: int, index: int, first=None):
    """The sampling of round `index`: budget / rounds and the sample counts split over the
    rounds (so R rounds take about as many calls as one; a given --samples exactly, at least
    one a round); after the first round (`first`, its
    Measured) its loops and sample count, so a measurement is calibrated and planned once and
    later rounds only warm up (one call) and sample."""
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
    """Every rank's samples of all rounds, round after round: [rank][sample]."""
    ranks = len(per_round[0])
    return [[t for one in per_round for t in one[rank]] for rank in range(ranks)]


def _slowest(one) -> np.ndarray:
    return np.max(np.asarray(one, dtype=float), axis=0)


def round_spread(per_round: Sequence[Sequence[Sequence[float]]]) -> float:
    """(high - low) / median of the per-round medians of the slowest rank's time per sample,
    (low, high) their median's confidence interval (metrics.median_interval): min and max up
    to 7 rounds, then without the extremes, so the extra rounds of a row whose machine changed
    state in one round can settle it (sweep/passes.py). 0 with one round."""
    medians = np.array([np.median(_slowest(one)) for one in per_round])
    if len(medians) < 2:
        return 0.0
    low, high = median_interval(medians.tolist())
    return float((high - low) / np.median(medians))


def round_p(per_round: Sequence[Sequence[Sequence[float]]]) -> float:
    """Kruskal-Wallis p that the rounds' samples (the slowest rank's) come from one
    distribution; nan with one round or when every sample is the same. scipy is imported
    here, outside any timed region, only for rows whose rounds' medians spread that far."""
    from scipy.stats import kruskal

    groups = [_slowest(one) for one in per_round]
    if len(groups) < 2 or np.ptp(np.concatenate(groups)) == 0:
        return math.nan
    return float(kruskal(*groups).pvalue)


def round_columns(per_round: Sequence[Sequence[Sequence[float]]]) -> dict:
    """What a row says about its rounds: how many, how much their medians differ, and whether
    that is more than their samples' spread explains (the p is computed only past the spread)."""
    spread = round_spread(per_round)
    p = round_p(per_round) if spread > ROUNDS_DISAGREE else math.nan
    return {"rounds": len(per_round), "round_spread": spread, "round_p": p,
            "rounds_disagree": bool(spread > ROUNDS_DISAGREE and p < ROUNDS_ALPHA)}
