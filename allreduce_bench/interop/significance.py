"""Is a ratio of medians more than noise? A hierarchical bootstrap over runs, rounds, samples:
a round's samples are no independent draws, so rounds and runs are the units of replication
(doc/methodology.md, "Significance in compare")."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP = 2000
# The spread of log medians assumed for a side with one round (runs differ by 5-30%)
SINGLE_ROUND_SPREAD = 0.10


Side = Sequence[Sequence[np.ndarray]]  # runs -> rounds -> per-sample times


def units(side: Side) -> list[list[np.ndarray]]:
    """The top units of replication: its runs when it has several, else its one run's rounds."""
    return [list(run) for run in side] if len(side) > 1 else [[r] for r in side[0]]


def unit_spread(side: Side, statistic=np.median) -> float:
    """(max - min) / median of the top units' statistic: how much a side disagrees with itself."""
    medians = np.array([statistic(np.concatenate(u)) for u in units(side)])
    return float((medians.max() - medians.min()) / np.median(medians)) if len(medians) > 1 else 0.0


def log_spread(side: Side, statistic=np.median) -> float | None:
    found = units(side)
    if len(found) < 2:
        return None
    return float(np.std(np.log([statistic(np.concatenate(u)) for u in found]), ddof=1))


def bootstrap_medians(side: Side, rng: np.random.Generator, draws: int = BOOTSTRAP,
                      statistic=np.median) -> np.ndarray:
    """`draws` bootstrap statistics of a side: units, their rounds, their samples drawn alike."""
    found = units(side)
    rounds_per = np.array([len(u) for u in found])
    counts = np.zeros((len(found), rounds_per.max()), dtype=int)
    for i, rounds in enumerate(found):
        counts[i, :len(rounds)] = [len(r) for r in rounds]
    padded = np.full(counts.shape + (counts.max(),), np.nan)
    for i, rounds in enumerate(found):
        for j, values in enumerate(rounds):
            padded[i, j, :len(values)] = values
    per_unit = max(1, int(round(rounds_per.mean())))
    per_round = max(1, int(round(counts[counts > 0].mean())))
    unit = rng.integers(0, len(found), (draws, len(found)))
    round_ = (rng.random((draws, len(found), per_unit)) * rounds_per[unit][..., None]).astype(int)
    n = counts[unit[..., None], round_]
    sample = (rng.random(n.shape + (per_round,)) * n[..., None]).astype(int)
    values = padded[unit[..., None, None], round_[..., None], sample]
    return statistic(values.reshape(draws, -1), axis=1)


def few_units_widening(base_units: int, other_units: int, tail: float) -> float:
    """Widening for few units: a bootstrap sees (C - 1) / C of their variance, and normal tails."""
    from scipy.stats import norm, t

    fewest = min(base_units, other_units)
    degrees = max(base_units - 1, 0) + max(other_units - 1, 0)
    variance = np.sqrt(fewest / (fewest - 1)) if fewest >= 2 else 1.0
    quantile = float(t.ppf(1 - tail, degrees) / norm.ppf(1 - tail)) if degrees >= 1 else 1.0
    return float(variance * quantile)


@dataclass(frozen=True)
class Judgement:
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, from the bootstrap distribution of the ratio
    significant: bool
    spread: float  # the larger side's round_spread
    assumed: bool  # a side had one round: its between-round spread was assumed or borrowed
    base_units: int  # the top units of replication: runs where a side has several, else rounds
    other_units: int


def judge(base: Side, other: Side, confidence: float, min_effect: float,
          rng: np.random.Generator, statistic=np.median) -> Judgement:
    """Compare two sides by `statistic` (np.mean where the sides' loops differ)."""
    base_medians = bootstrap_medians(base, rng, statistic=statistic)
    other_medians = bootstrap_medians(other, rng, statistic=statistic)
    known = [s for s in (log_spread(base, statistic), log_spread(other, statistic)) if s is not None]
    borrowed = float(np.sqrt(np.mean(np.square(known)))) if known else SINGLE_ROUND_SPREAD
    sizes = [len(units(base)), len(units(other))]
    for size, medians in zip(sizes, (base_medians, other_medians)):
        if size < 2:  # one round: the state it sat in is one draw of many
            medians *= np.exp(rng.normal(0.0, borrowed, len(medians)))
    ratio = float(median_of(other, statistic) / median_of(base, statistic))
    tail = (1 - confidence) / 2
    logs = np.log(other_medians / base_medians)
    logs = np.log(ratio) + few_units_widening(sizes[0], sizes[1], tail) * (logs - np.median(logs))
    ratios = np.exp(logs)
    low, high = float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))
    p_value = float(min(1.0, 2 * min(np.mean(ratios <= 1), np.mean(ratios >= 1))))
    significant = bool((low > 1 or high < 1) and abs(ratio - 1) >= min_effect)
    return Judgement(ratio, low, high, p_value, significant,
                     max(unit_spread(base, statistic), unit_spread(other, statistic)),
                     min(sizes) < 2, *sizes)


def median_of(side: Side, statistic=np.median) -> float:
    return float(statistic(np.concatenate([r for run in side for r in run])))


def verdict(j: Judgement, min_effect: float) -> str:
    """'1.30x slower (significant)', '1.04x faster (not significant: ...)': why not, if not."""
    word = "slower" if j.ratio >= 1 else "faster"
    factor = j.ratio if j.ratio >= 1 else 1 / j.ratio
    single = (f"one round on a side: the interval assumes rounds differ by "
              f"{SINGLE_ROUND_SPREAD:.0%}" if j.assumed and max(j.base_units, j.other_units) < 2
              else "one round on a side: the interval borrows the other side's spread"
              if j.assumed else "")
    if j.significant:
        why = "significant"
    elif j.spread >= max(min_effect, abs(j.ratio - 1)):
        why = f"not significant: the runs disagree with themselves by {j.spread:.0%}"
    elif abs(j.ratio - 1) < min_effect:
        why = f"not significant: below the {min_effect:.0%} smallest change called one"
    else:
        why = "not significant"
    return f"{factor:.2f}x {word} ({why}{'; ' + single if single else ''})"
