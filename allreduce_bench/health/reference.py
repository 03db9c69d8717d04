"""What a check is expected to reach, and under which value it is slow.

Three sources, per (check, size_bytes), first found wins:

- `--expect inter=40GB/s,intra=300GB/s`: absolute bus bandwidths at the bandwidth size (the
  largest), as vendors' acceptance tests state them ("expected >= 40 GB/s"); the value itself
  is the threshold. `inter` applies to the pair and rail checks, `intra` to the intra check.
- `--baseline DIR`: the expected values and tolerances of an earlier health run (health.json).
- the fleet: a robust outlier test on this run's own measurements. Expected is the median over
  the hosts of one check and size, the spread sigma = 1.4826 * MAD (the normal-consistent
  median absolute deviation) taken on the fast side of the median (a fault only slows), and a
  measurement is slow under median * (1 - tolerance) with tolerance = max(TOLERANCE_FLOOR,
  under(k * sigma / median)), k = max(K_SIGMA, fleet_sigmas(groups)): the sigmas that keep a
  fleet of that many groups within NOISE_BUDGET healthy groups flagged by noise alone per
  check (a Bonferroni share of the budget per group), `under` reading a spread in log space (bandwidth noise is
  multiplicative). The median stays put while fewer than half of the hosts are slow
  (breakdown point 50%), and the one-sided MAD is not widened by them at all, so up to N/8 bad
  hosts (N/4 of round 1's pairs) cannot drag the threshold down to them. doc/health.md gives
  the measurements the two constants come from. The tolerance is also at least K_NOISE
  standard errors of a ratio of two medians as noisy as the fleet's samples (their cv over
  their count): on a busy machine the pairs' medians differ by that much without any fault;
  on a quiet fabric the term is ~1%.

A measurement made beside a *control* (known-good hosts measured side by side in the same
round, as re-pairing rounds do) is judged against the control's busbw of that moment instead
of the fleet's median, with the fleet's tolerance: load that slows a whole round (other jobs
on the machine, a busy fabric) slows the control alike and flags nobody.
"""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError

K_SIGMA = 4.0  # a healthy group under the threshold is a > 4-sigma event: 3e-5 per group, at least
NOISE_BUDGET = 0.01  # healthy groups under a fleet threshold by the fleet's spread alone, per check and key
JUDGED_PER_VALUE = 3  # the rounds a host's value of one check is judged in, about
TOLERANCE_FLOOR = 0.25  # never flag less than 25% under the median, however quiet the fleet
LATENCY_FLOOR = 0.9  # smaller sizes: flagged only 10x slower (a ~100 us call moves with the load)
MAD_TO_SIGMA = 1.4826
K_NOISE = 3.0  # standard errors of the ratio of two medians the tolerance is at least
MEDIAN_SE = 1.2533  # standard error of a median: 1.2533 sigma / sqrt(n) (normal samples)
MIN_FLEET = 3  # fewer groups than this: no outlier test (nothing is an outlier of one or two)
BAD_FRACTION = 0.5  # a confirmed host under half of expected is `bad`, else `slow`
_EXPECT_KEYS = {"inter": ("pair", "rail"), "intra": ("intra",)}


@dataclass(frozen=True)
class Threshold:
    """Expected busbw of one check at one size, and the busbw under which it is slow."""

    check: str
    size_bytes: int
    expected_GBps: float
    threshold_GBps: float
    tolerance: float  # threshold = expected * (1 - tolerance)
    source: str  # expect | baseline | fleet | too few groups | control (round k)
    groups: int = 0  # how many measurements the fleet statistics came from
    spread: float | None = None  # fleet's sigma / median
    noise: float | None = None  # standard error of a ratio of two medians, from the samples

    def as_json(self) -> dict:
        return asdict(self)


def fleet_threshold(check: str, size_bytes: int, values: list[float], k_sigma: float = K_SIGMA,
                    floor: float = TOLERANCE_FLOOR, noise: float = 0.0) -> Threshold:
    """The robust outlier threshold of one check's measurements at one size; `noise` is the
    relative standard error of a ratio of two of its medians (ratio_noise)."""
    if not values:
        raise ValueError(f"no {check} measurements at {size_bytes} bytes to compare")
    median = statistics.median(values)
    if len(values) < MIN_FLEET or median <= 0:
        return Threshold(check, size_bytes, median, 0.0, 1.0, "too few groups", len(values))
    # the spread on the fast side of the median only: a fault only slows a group, so slow
    # outliers (and the healthy partners they drag down) must not widen the tolerance
    spread = MAD_TO_SIGMA * statistics.median(v - median for v in values if v >= median) / median
    tolerance = max(floor, under(max(k_sigma, fleet_sigmas(len(values))) * spread), under(K_NOISE * noise))
    return Threshold(check, size_bytes, median, median * (1 - tolerance), tolerance, "fleet",
                     len(values), spread, noise)


def fleet_sigmas(groups: int) -> float:
    """The sigmas under the median a threshold must reach so that `groups` healthy values, each
    judged JUDGED_PER_VALUE times, fall under it by Gaussian noise with NOISE_BUDGET
    probability in all (Bonferroni: the budget shared over the fleet): 3.3 for 8 groups, 4.5
    for 1,024, 5.2 for 32,768 (4,096 hosts x 8 rails). K_SIGMA is the least."""
    return -statistics.NormalDist().inv_cdf(NOISE_BUDGET / (max(1, groups) * JUDGED_PER_VALUE))


def under(spread: float) -> float:
    """How far under the median a relative spread (k sigmas, k standard errors) reaches, taken in
    log space: bandwidth noise is multiplicative, so 3 x 30% is a ratio of exp(-0.9) = 0.41, not
    a 90% (or, past 33%, a more-than-100%) drop that no slow host could ever show. For a small
    spread it is the spread itself."""
    return 1 - math.exp(-spread)


def ratio_noise(standard_errors: list[float]) -> float:
    """The relative standard error of a ratio of two medians, each as noisy as the typical
    (median) one of `standard_errors` (each a median's relative standard error)."""
    return math.sqrt(2) * statistics.median(standard_errors) if standard_errors else 0.0


def parse_expect(text: str | None) -> dict[str, float]:
    """'inter=40GB/s,intra=300GB/s' -> {'inter': 40.0, 'intra': 300.0} (GB/s of busbw)."""
    if not text:
        return {}
    found = {}
    for item in (part.strip() for part in text.split(",")):
        match = re.fullmatch(r"([a-z]+)\s*=\s*(.+)", item)
        if not match or match.group(1) not in _EXPECT_KEYS:
            raise UsageError(f"--expect {text!r}: {item!r} is not CHECK=BANDWIDTH with CHECK one of "
                             f"{', '.join(_EXPECT_KEYS)}; write e.g. inter=40GB/s,intra=300GB/s")
        found[match.group(1)] = units.parse_bandwidth(match.group(2), f"--expect {match.group(1)}") / 1e9
    return found


class Reference:
    """Thresholds per (check, size_bytes): --expect, then --baseline, then fitted on the fleet."""

    def __init__(self, sizes: Iterable[int], expect: dict[str, float] | None = None,
                 baseline: list[dict] | None = None, k_sigma: float = K_SIGMA,
                 floor: float = TOLERANCE_FLOOR):
        self.sizes = sorted(sizes)
        self.k_sigma, self.floor = k_sigma, floor
        self.fixed: dict[tuple[str, int], Threshold] = {}
        for row in baseline or ():
            key = (row["check"], int(row["size_bytes"]))
            self.fixed[key] = Threshold(key[0], key[1], row["expected_GBps"],
                                        row["expected_GBps"] * (1 - row["tolerance"]),
                                        row["tolerance"], "baseline", row.get("groups", 0),
                                        row.get("spread"))
        bandwidth_size = self.sizes[-1]
        for which, value in (expect or {}).items():
            for check in _EXPECT_KEYS[which]:
                self.fixed[(check, bandwidth_size)] = Threshold(check, bandwidth_size, value, value,
                                                                0.0, "expect")
        self.fitted: dict[tuple[str, int], Threshold] = {}
        self.controls: dict[tuple[int | None, str, int], float] = {}  # (round, check, size) -> busbw
        self._got: dict[tuple[str, int, int | None], Threshold | None] = {}  # get's answers until a change

    def fit(self, values: dict[tuple[str, int], list[float]],
            noise: dict[tuple[str, int], float] | None = None) -> None:
        """Fleet thresholds for every (check, size) measured that nothing fixed; fitted once
        (later rounds re-pair suspects and are no sample of the fleet). Sizes below the
        bandwidth size are latency-bound: their floor is LATENCY_FLOOR. `noise`: per key, the
        relative standard error of a ratio of two medians (ratio_noise)."""
        self._got.clear()
        for key, found in values.items():
            if key not in self.fixed and key not in self.fitted and found:
                floor = self.floor if key[1] == self.sizes[-1] else max(self.floor, LATENCY_FLOOR)
                self.fitted[key] = fleet_threshold(*key, found, self.k_sigma, floor,
                                                   (noise or {}).get(key, 0.0))

    def control(self, round_index: int, check: str, size_bytes: int, busbw_GBps: float) -> None:
        """The busbw the control groups of a round measured on one check and size."""
        self.controls[(round_index, check, size_bytes)] = busbw_GBps
        self._got.clear()

    def controlled(self, round_index: int) -> bool:
        """Whether a round had a control to judge its measurements against."""
        return any(key[0] == round_index for key in self.controls)

    def get(self, check: str, size_bytes: int, round_index: int | None = None) -> Threshold | None:
        """The threshold of a check and size; in a round with a control, a fleet threshold
        moves to the control's busbw of that round (same tolerance)."""
        asked = (check, size_bytes, round_index)
        if asked not in self._got:
            self._got[asked] = self._get(check, size_bytes, round_index)
        return self._got[asked]

    def _get(self, check: str, size_bytes: int, round_index: int | None) -> Threshold | None:
        key = (check, size_bytes)
        found = self.fixed.get(key) or self.fitted.get(key)
        beside = self.controls.get((round_index, check, size_bytes))
        if found is None or beside is None or found.source != "fleet":
            return found
        return Threshold(check, size_bytes, beside, beside * (1 - found.tolerance), found.tolerance,
                         f"control (round {round_index})", found.groups, found.spread, found.noise)

    def slow(self, check: str, size_bytes: int, busbw_GBps: float, round_index: int | None = None) -> bool:
        threshold = self.get(check, size_bytes, round_index)
        return threshold is not None and busbw_GBps < threshold.threshold_GBps

    def thresholds(self) -> list[Threshold]:
        return sorted({**self.fitted, **self.fixed}.values(), key=lambda t: (t.check, t.size_bytes))
