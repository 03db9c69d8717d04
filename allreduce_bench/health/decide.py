"""From measurements to host states: who is good, who is confirmed faulty, who needs a partner.

The rules (the same for `--pairs quick` and `--pairs all`):

- a measurement of a pair is slow when any of its checks (the whole pair's AllReduce, or one
  rail's) at any size is under its threshold;
- a host is *good* when one of its pairs was entirely fine (a bad host slows every pair it is
  in) and its own intra check is fine;
- a partner is *good for h* when it is good through a pair without h, so no host vouches for
  itself through the pair under suspicion;
- a host is *faulty* when its intra check was slow k times (a slow one is measured again), or
  when it was slow with k partners good for it, on a check common to all of them (that check
  names the rail); slow with each on another check is noise;
- a pair slow while both members are good elsewhere is a link or path suspect, confirmed when
  measured k times and slow each time on the same check;
- k (`confirmations`) is CONFIRMATIONS, more where the fleet is large and its moments of load
  common: a healthy host slowed by a passing moment in each of k rounds is named, so k is the
  least with N x (moment rate)^k x (the ways to be named) within FALSE_ALARM_BUDGET per check,
  the moment rate read from this check's own measurements (`moment_rate`);
- a finding is *controlled* when one of its slow measurements was made beside a control (known-
  good hosts measured side by side in the same round, reference.py) and judged against it: the
  plan (rounds.py) re-measures a finding that is not, where two known-good hosts are free, and a
  healthy host then reads fine beside the control, however slow the earlier rounds' moments were;
- a host faulty on a pair or rail check is *proven* (named slow or bad) only with evidence a
  moment of load does not give: controlled, or slow once more with a good partner after it was
  found faulty (where no control can be free: 2 or 3 hosts). Two slow moments alone leave it
  `not judged`.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from allreduce_bench.health.reference import Reference

CONFIRMATIONS = 2  # known-good partners a host must be slow with to be called faulty (at least)
MAX_CONFIRMATIONS = 4
FALSE_ALARM_BUDGET = 0.02  # healthy hosts and links named per check, expected, over the whole fleet
MIN_MOMENT_SAMPLE = 32  # measurements of good hosts before their moments of load are counted

Channel = tuple[str, "int | None"]  # ("pair", None), ("rail", 1), ("intra", None)


@dataclass(frozen=True)
class Measurement:
    """One group's result at one size: the busbw the health verdicts compare."""

    round: int
    check: str  # intra | pair | rail | bisect
    hosts: tuple[str, ...]
    rail: int | None
    size_bytes: int
    busbw_GBps: float
    time_us_median: float
    noise: float = 0.0  # relative standard error of its median: 1.2533 cv / sqrt(samples)


@dataclass
class PairResult:
    """Everything one pair of hosts measured in one round, and which of its checks were slow."""

    round: int
    hosts: tuple[str, str]
    measurements: list[Measurement] = field(default_factory=list)
    slow: set[tuple] = field(default_factory=set)  # (check, rail, size_bytes) under threshold

    def partner(self, host: str) -> str:
        return self.hosts[1] if self.hosts[0] == host else self.hosts[0]


@dataclass
class HostState:
    host: str
    status: str = "pending"  # pending | recheck | good | suspect | unconfirmed | faulty | unreachable
    channels: set[Channel] = field(default_factory=set)  # what is faulty
    slow_with: list[str] = field(default_factory=list)  # partners good for it it was slow with
    ok_with: list[str] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)  # every partner it was measured with
    controlled: bool = False  # faulty, and slow in a round with a control (reference.py)
    again: bool = False  # faulty, and slow with a good partner once more than it took to find so

    @property
    def proven(self) -> bool:
        """Faulty beyond a moment of load: beside a control, slow once more, or on its intra check
        (whose recheck the plan always measures, beside a host found fine where there is one)."""
        return self.controlled or self.again or ("intra", None) in self.channels


def channel_of(m: Measurement) -> Channel:
    return (m.check, m.rail)


def pair_results(measurements: Iterable[Measurement], reference: Reference) -> list[PairResult]:
    """The pair and rail measurements grouped per (round, pair), with their slow checks."""
    found: dict[tuple[int, tuple[str, ...]], PairResult] = {}
    for m in measurements:
        if m.check not in ("pair", "rail"):
            continue
        result = found.get((m.round, m.hosts))
        if result is None:
            result = found[(m.round, m.hosts)] = PairResult(m.round, m.hosts)  # type: ignore[arg-type]
        result.measurements.append(m)
        if reference.slow(m.check, m.size_bytes, m.busbw_GBps, m.round):
            result.slow.add((m.check, m.rail, m.size_bytes))
    return list(found.values())


def intra_rounds(measurements: Iterable[Measurement], reference: Reference) -> dict[str, dict[int, bool]]:
    """host -> round -> whether its intra check was slow in that round (at any size), in the
    order of the rounds."""
    slow: dict[str, dict[int, bool]] = defaultdict(dict)
    for m in measurements:
        if m.check == "intra":
            was = slow[m.hosts[0]].get(m.round, False)
            slow[m.hosts[0]][m.round] = was or reference.slow(m.check, m.size_bytes, m.busbw_GBps, m.round)
    return {h: dict(sorted(rounds.items())) for h, rounds in slow.items()}


def moment_rate(results: Sequence[PairResult], intra: dict[str, list[bool]], good: set[str]) -> float:
    """A healthy host's chance to read slow in one round, from this check: the pair
    measurements of two good hosts that were slow anyway (a moment on either of the two: half
    a host's), and the hosts whose intra check was slow and then fine. Each counts once it has
    MIN_MOMENT_SAMPLE measurements; 0 before."""
    both_good = [r for r in results if set(r.hosts) <= good]
    rates = [0.0]
    if len(both_good) >= MIN_MOMENT_SAMPLE:
        rates.append(sum(bool(r.slow) for r in both_good) / len(both_good) / 2)
    if len(intra) >= MIN_MOMENT_SAMPLE:
        rates.append(sum(any(slow[:-1]) and not slow[-1] for slow in intra.values()) / len(intra))
    return max(rates)


def confirmations(hosts: int, rate: float) -> int:
    """k: the slow measurements (with known-good partners, or of the intra check) that name a
    host, and the measurements that confirm a link: the least k >= CONFIRMATIONS whose
    expected false alarms, hosts x rate^k x (2 + 2^(k-1)) (its pairs, its intra check, and
    the links of its pairs, slowed by a moment of either host), fit FALSE_ALARM_BUDGET."""
    for k in range(CONFIRMATIONS, MAX_CONFIRMATIONS):
        if hosts * rate ** k * (2 + 2 ** (k - 1)) <= FALSE_ALARM_BUDGET:
            return k
    return MAX_CONFIRMATIONS


def evaluate(hosts: Sequence[str], measurements: Sequence[Measurement], reference: Reference,
             unreachable: Iterable[str] = (), results: Sequence[PairResult] | None = None
             ) -> tuple[dict[str, HostState], int]:
    """(every host's state, k: `confirmations`) after the rounds measured so far, recomputed
    from all of them (`results`: their pair_results, where already made)."""
    states = {h: HostState(h) for h in hosts}
    results = pair_results(measurements, reference) if results is None else results
    intra_by_round = intra_rounds(measurements, reference)
    intra = {h: list(rounds.values()) for h, rounds in intra_by_round.items()}
    intra_bad = {h for h, slow in intra.items() if slow and slow[-1]}  # confirmed, or measured again
    ok_partners: dict[str, set[str]] = defaultdict(set)
    by_host: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        for h in r.hosts:
            by_host[h].append(r)
            states[h].tried.add(r.partner(h))
            if not r.slow:
                ok_partners[h].add(r.partner(h))

    def good_for(partner: str, host: str) -> bool:
        return partner not in intra_bad and bool(ok_partners[partner] - {host})

    good = {h for h in hosts if ok_partners[h] and h not in intra_bad}
    k = confirmations(len(hosts), moment_rate(results, intra, good))
    for h, state in states.items():
        state.ok_with = sorted(ok_partners[h])
        confirming = [r for r in by_host[h] if r.slow and good_for(r.partner(h), h)]
        state.slow_with = [r.partner(h) for r in confirming]
        state.status, state.channels = _status(intra.get(h, []), bool(ok_partners[h]), confirming,
                                               bool(by_host[h]), k)
        if state.status == "faulty":
            state.controlled = (reference.controlled(max(intra_by_round[h])) if ("intra", None) in state.channels
                                else any(reference.controlled(r.round) for r in confirming))
            state.again = len(confirming) > k
    for h in unreachable:
        states[h].status = "unreachable"
    return states, k


def _status(intra: list[bool], fine_once: bool, confirming: list[PairResult],
            measured: bool, k: int = CONFIRMATIONS) -> tuple[str, set[Channel]]:
    """One host's status: its intra rounds, whether a pair of it was fine, the slow pairs with
    partners good for it, whether it was in any pair. Confirmed means slow each time on the
    same check at the same size: one moment of load slows some size of some pair."""
    if len(intra) >= k and all(intra):
        return "faulty", {("intra", None)}
    if intra and intra[-1]:
        return "recheck", set()  # slow intra once: measured again before it is judged
    if fine_once:
        return "good", set()
    common = set.intersection(*(r.slow for r in confirming)) if confirming else set()
    if len(confirming) >= k:
        # slow with every good partner, but on other checks or sizes each time: noise
        return ("faulty", {(c, rail) for c, rail, _ in common}) if common else ("unconfirmed", set())
    return ("suspect", set()) if measured else ("pending", set())


def link_findings(results: Sequence[PairResult], states: dict[str, HostState],
                  k: int = CONFIRMATIONS) -> dict[frozenset, str]:
    """Slow pairs whose hosts are both good elsewhere: `confirmed` (slow every time, >= k times,
    on a common check), `suspect` (slow each time, not yet measured k times) or `noise` (fine
    again, or slow on another check each time).
    Whether a confirmed one was slow beside a control: controlled_link."""
    by_pair: dict[frozenset, list[PairResult]] = defaultdict(list)
    for r in results:
        by_pair[frozenset(r.hosts)].append(r)
    found = {}
    for pair, measured in by_pair.items():
        slow = [r for r in measured if r.slow]
        if not slow or any(states[h].status != "good" for h in pair):
            continue
        if len(slow) == len(measured) and set.intersection(*(r.slow for r in slow)):
            found[pair] = "confirmed" if len(measured) >= k else "suspect"
        else:
            found[pair] = "noise"
    return found


def controlled_link(results: Sequence[PairResult], pair: frozenset, reference: Reference) -> bool:
    """Whether a slow measurement of this pair was made in a round with a control."""
    return any(r.slow and frozenset(r.hosts) == pair and reference.controlled(r.round) for r in results)
