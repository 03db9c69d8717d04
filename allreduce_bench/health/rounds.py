"""The coordinator's plan, one round at a time: which groups measure next, given what the
earlier rounds found. Pure: it is told the measurements and the hosts that stopped answering.

Order: the intra round (each host's local ranks; skipped at one rank per host), then the pair
rounds, then with `--bisect` the bisection rounds. Pair rounds follow the circle method
(pairing.circle_rounds; its round 1 is one perfect matching): `--pairs all` runs all of it;
`--pairs quick` runs it only until MIN_FLEET pairs are measured (round 1 from 6 hosts on; two
rounds for 4 hosts, whose one matching has only two pairs), fits the fleet's thresholds, then
pairs every host not yet good or faulty (the members of a slow pair, a host that sat out, the
partner of a host that stopped answering) with a known-good host it has not met, until nobody
needs a partner. A bad host is slow with its round-1 partner once that one is proven good and
with its round-2 partner: two confirmations; two bad hosts in one pair need round 3. Where the
fleet is large and its moments of load common, decide.py asks for k > 2 confirmations: the
budget grows by k - 2 pair rounds (and an intra recheck more), and by one round while a link
slow every time lacks its k measurements.

Every re-pairing round (and the intra round that measures the slow ones again) also measures a
*control*: two known-good hosts left free (one for intra; with many free, one control group per
HOSTS_PER_CONTROL of them, up to CONTROLS, their median), side by side with the suspects, and
each suspect is judged against the control of its round (reference.py): a moment of load slows
both. A host or link found slow without a control yet is measured once more beside one, where
two known-good hosts are free and the round budget allows: re-measured before it is judged. With
fewer than three known-good hosts (2 or 3 hosts) a host found faulty is measured once more
without a control: slow again, it is proven; not measured again, it is `not judged`.
"""
from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from allreduce_bench.health import pairing
from allreduce_bench.health.decide import (
    CONFIRMATIONS,
    HostState,
    Measurement,
    PairResult,
    controlled_link,
    evaluate,
    link_findings,
    pair_results,
)
from allreduce_bench.health.reference import MIN_FLEET, TOLERANCE_FLOOR, Reference, ratio_noise

MODES = ("quick", "all")
QUICK_PAIR_ROUNDS = 3  # round 1, re-pairing, confirmation (from 6 hosts on); one more per confirmation
CONTROLS, HOSTS_PER_CONTROL = 16, 4  # control groups of a round: one, and one per 4 free good hosts up to 16


@dataclass(frozen=True)
class Round:
    index: int  # 1, 2, ... in the order run
    kind: str  # intra | pairs | bisect
    groups: tuple[tuple[str, ...], ...]  # the hosts of each group measured side by side
    idle: tuple[str, ...]
    why: str
    controls: tuple[tuple[str, ...], ...] = ()  # groups of known-good hosts the others are judged against

    def as_json(self) -> dict:
        return {"round": self.index, "kind": self.kind, "groups": [list(g) for g in self.groups],
                "idle": list(self.idle), "why": self.why, "controls": [list(g) for g in self.controls]}


class Bisection:
    """The whole world's AllReduce, then the two halves side by side, recursing into the half
    slower than the other by more than `tolerance`, while both halves are collectives."""

    def __init__(self, hosts: Sequence[str], ranks_per_node: int, tolerance: float = TOLERANCE_FLOOR):
        self.current, self.ranks_per_node, self.tolerance = list(hosts), ranks_per_node, tolerance
        self.steps: list[dict] = []
        self.narrowed = False
        self.done = len(hosts) * ranks_per_node < 2

    def groups(self) -> tuple[tuple[str, ...], ...]:
        if not self.steps:
            return (tuple(self.current),)
        return tuple(tuple(h) for h in pairing.halves(self.current))

    def record(self, busbw_GBps: Sequence[float]) -> None:
        groups = self.groups()
        self.steps.append({"groups": [list(g) for g in groups], "busbw_GBps": list(busbw_GBps)})
        if len(groups) == 2:
            (a, b), (va, vb) = groups, busbw_GBps
            slower = a if va < vb * (1 - self.tolerance) else b if vb < va * (1 - self.tolerance) else None
            if slower is None:
                self.done = True
                return
            self.current, self.narrowed = list(slower), True
        self.done = not pairing.can_split(self.current, self.ranks_per_node)

    def as_json(self) -> dict:
        return {"steps": self.steps, "suspects": self.current if self.narrowed else [],
                "tolerance": self.tolerance}


class HealthCheck:
    """Rounds for one health run over `hosts` (each with `ranks_per_node` ranks)."""

    def __init__(self, hosts: Sequence[str], ranks_per_node: int, reference: Reference,
                 mode: str = "quick", bisect: bool = False):
        if mode not in MODES:
            raise ValueError(f"unknown pairing mode {mode!r}")
        self.hosts, self.ranks_per_node, self.reference = list(hosts), ranks_per_node, reference
        self.mode = mode
        self.measurements: list[Measurement] = []
        self.rounds: list[Round] = []
        self.unreachable: dict[str, int] = {}  # host -> round it stopped answering in
        self.seconds: dict[int, float] = {}  # round -> its wall time, where the coordinator timed it
        self.holdbacks: dict[str, dict[int, dict]] = {}  # host -> rank -> its throttling
        self.bisection = Bisection(hosts, ranks_per_node) if bisect else None
        self._circle: Iterator[tuple[list[tuple[str, str]], list[str]]] | None = None  # made as asked for
        self._evaluated: tuple[tuple, list[PairResult], dict[str, HostState], int] | None = None
        self._fitted = False  # the fleet's pair and rail thresholds
        self._fit_round = 0  # the pair rounds they were fitted on
        self._pairs_done = len(hosts) < 2
        self._intra_done = ranks_per_node < 2

    @property
    def pair_rounds(self) -> int:
        return sum(r.kind == "pairs" for r in self.rounds)

    def reachable(self) -> list[str]:
        return [h for h in self.hosts if h not in self.unreachable]

    def states(self) -> dict[str, HostState]:
        return self._evaluate()[0]

    def confirmations(self) -> int:
        """k of decide.py: the slow measurements that name a host or confirm a link, now."""
        return self._evaluate()[1]

    def results(self) -> list[PairResult]:
        """decide.py's pair_results of every round so far."""
        self._evaluate()
        return self._evaluated[1]  # type: ignore[index]

    def _evaluate(self) -> tuple[dict[str, HostState], int]:
        """decide.py's pair results, states and k, made once per change (a round recorded, a fit)."""
        key = (len(self.measurements), len(self.unreachable), len(self.reference.fitted),
               len(self.reference.controls))
        if self._evaluated is None or self._evaluated[0] != key:
            results = pair_results(self.measurements, self.reference)
            self._evaluated = (key, results, *evaluate(self.hosts, self.measurements, self.reference,
                                                        self.unreachable, results))
        return self._evaluated[2], self._evaluated[3]

    def next_round(self) -> Round | None:
        """The next round to measure, or None when the check is complete."""
        if not self._intra_done:
            planned = self._intra()
            if planned is not None:
                return planned
            self._intra_done = True
        elif self.ranks_per_node >= 2 and not self._pairs_done:
            planned = self._intra()  # k grew with the moments the pair rounds met: a recheck more
            if planned is not None:
                return planned
        if not self._pairs_done:
            planned = self._all_pairs() if self.mode == "all" else self._quick_pairs()
            if planned is not None:
                return planned
            self._pairs_done = True
        if self.bisection is not None and not self.bisection.done:
            live = set(self.reachable())
            groups = self.bisection.groups()
            if all(set(g) <= live for g in groups):
                return self._round("bisect", groups, "the world, then its halves side by side")
            self.bisection.done = True  # a host of the current set stopped answering
        return None

    def held_back(self, host: str, rank: int, found: dict | None) -> None:
        """What held one rank back since the start (core/host/cgroups.py, gpus.py), latest reading."""
        if found:
            self.holdbacks.setdefault(host, {})[rank] = found

    def never_came(self, hosts: Sequence[str]) -> None:
        """Hosts none of whose ranks joined the world: unreachable before round 1 ("round 0")."""
        for host in hosts:
            self.unreachable.setdefault(host, 0)

    def record(self, measured: Round, measurements: Sequence[Measurement],
               unreachable: Sequence[str] = ()) -> None:
        """What `measured` found: its measurements, and the hosts that did not answer in it."""
        for host in unreachable:
            self.unreachable.setdefault(host, measured.index)
        self.measurements.extend(measurements)
        for (check, size), value in _control_values(measured, measurements).items():
            self.reference.control(measured.index, check, size, value)
        if measured.kind == "intra":
            self.reference.fit(_values(measurements), _noise(measurements))  # the first intra round: the fleet
        elif measured.kind == "pairs" and self.mode == "quick" and not self._fitted:
            pairs = {m.hosts for m in self.measurements if m.check == "pair"}
            if len(pairs) >= MIN_FLEET:
                self._fit()
        elif measured.kind == "bisect" and self.bisection is not None:
            largest = max(m.size_bytes for m in measurements) if measurements else None
            by_group = {m.hosts: m.busbw_GBps for m in measurements if m.size_bytes == largest}
            if len(by_group) != len(measured.groups):
                self.bisection.done = True
            else:
                self.bisection.record([by_group[g] for g in measured.groups])

    def _round(self, kind: str, groups, why: str, controls=()) -> Round:
        groups = [*groups, *controls]
        busy = {h for g in groups for h in g}
        made = Round(len(self.rounds) + 1, kind, tuple(tuple(g) for g in groups),
                     tuple(h for h in self.reachable() if h not in busy), why,
                     tuple(tuple(g) for g in controls))
        self.rounds.append(made)
        return made

    def _intra(self) -> Round | None:
        """Every host's intra check, then once more on the hosts it found slow."""
        done = sum(r.kind == "intra" for r in self.rounds)
        if done == 0:
            return self._round("intra", [(h,) for h in self.reachable()], "each host's local ranks")
        states = self.states()
        again = [(h,) for h in self.reachable() if states[h].status == "recheck"]
        if done < self.confirmations() and again:
            known_fine = self._intra_fine() - {h for (h,) in again}  # once: it reads every measurement
            fine = [(h,) for h in self.reachable() if h in known_fine]
            fine = fine[:_controls(len(fine))]
            return self._round("intra", again, "the slow ones once more, to confirm"
                               + (", beside a host found fine" if fine else ""), fine)
        return None

    def _intra_fine(self) -> set[str]:
        """Hosts whose first intra check was fine: the intra round's control."""
        ref = self.reference
        slow = {m.hosts[0] for m in self.measurements
                if m.check == "intra" and ref.slow(m.check, m.size_bytes, m.busbw_GBps, m.round)}
        return {m.hosts[0] for m in self.measurements if m.check == "intra"} - slow

    def _fit(self) -> None:
        """Fit the fleet's thresholds on the pair rounds so far: later rounds re-pair suspects
        with good hosts and are no sample of the fleet."""
        self.reference.fit(_values(self.measurements), _noise(self.measurements))
        self._fitted, self._fit_round = True, self.pair_rounds

    def _circle_round(self) -> Round | None:
        if self._circle is None:
            self._circle = pairing.circle_rounds(self.reachable())
        for pairs, _ in self._circle:
            live = [p for p in pairs if not set(p) & set(self.unreachable)]
            if live:
                return self._round("pairs", live, "the circle method: every pair once" if self.mode == "all"
                                   else "perfect matchings until the fleet has a median")
        return None

    def _all_pairs(self) -> Round | None:
        planned = self._circle_round()
        if planned is None:
            self._fit()  # every pair is the fleet's sample
        return planned

    def _quick_pairs(self) -> Round | None:
        if not self._fitted:
            planned = self._circle_round()
            if planned is not None:
                return planned
            self._fit()  # 2 or 3 hosts: every pair measured, still too few for a median
        # a round that lost a host may cost one more (not those that never came: unpaired)
        lost = len(set(self.unreachable.values()) - {0})
        k = self.confirmations()
        states = self.states()
        results = self.results()
        links = link_findings(results, states, k)
        # a link is re-measured from the third pair round on (its hosts are proven good in the
        # second): one round more while one slow every time still lacks its k measurements
        pending = any(finding == "suspect" for finding in links.values())
        if self.pair_rounds >= max(QUICK_PAIR_ROUNDS, self._fit_round + 1) + lost + k - CONFIRMATIONS + pending:
            return None
        needy = [h for h in self.hosts if states[h].status in ("suspect", "pending")]
        good = [h for h in self.hosts if states[h].status == "good"]
        tried = {h: s.tried for h, s in states.items()}
        pairs, _ = pairing.repair(needy, good, tried)
        busy = {h for p in pairs for h in p}
        for pair, finding in links.items():
            again = finding == "suspect" or (finding == "confirmed"
                                             and not controlled_link(results, pair, self.reference))
            if again and not pair & busy:  # a slow link, measured once more
                pairs.append(tuple(sorted(pair)))
                busy |= pair
        pairs += self._beside_control(states, good, busy)
        free = [g for g in good if g not in {h for p in pairs for h in p}]
        slow_pairs = {frozenset(r.hosts) for r in results if r.slow}
        controls = _control_pairs(free, slow_pairs) if pairs else []
        return self._round("pairs", pairs, "each host not yet told apart with a known-good host "
                                           "it has not met; slow links once more"
                           + ("; beside a control pair of known-good hosts" if controls else ""),
                           controls) if pairs else None

    def _beside_control(self, states, good: list[str], busy: set[str]) -> list[tuple[str, str]]:
        """Hosts found faulty without the evidence a moment of load does not give (decide.py
        `proven`), each with a known-good partner (one it has not met where it can): while two
        known-good hosts stay free for the control, or, where there are never that many (2 or 3
        hosts), alone: a further moment."""
        pairs = []
        alone = len(good) < 3
        for host in [h for h, state in states.items() if state.status == "faulty" and not state.proven]:
            free = [g for g in good if g not in busy]
            if host in busy or len(free) < (1 if alone else 3):
                continue
            partner = next((g for g in free if g not in states[host].tried), free[0])
            pairs.append((host, partner))
            busy |= {host, partner}
        return pairs


def _controls(free: int) -> int:
    """How many control groups a round measures with `free` known-good hosts left free: one,
    and where many are free one per HOSTS_PER_CONTROL, up to CONTROLS, so that a moment of load
    on one control does not move the round's expectation (their median): judged against one
    loaded control, every bad host of a simulated round read fine (scripts/simulate_health.py)."""
    return max(1, min(CONTROLS, free // HOSTS_PER_CONTROL))


def _control_pairs(free: Sequence[str], slow_pairs: set[frozenset]) -> list[tuple[str, str]]:
    """Disjoint pairs of the free known-good hosts, never a pair found slow, `_controls` of them."""
    chosen: list[tuple[str, str]] = []
    used: set[str] = set()
    for a, b in itertools.combinations(free, 2):
        if len(chosen) == _controls(len(free)):
            break
        if a not in used and b not in used and frozenset((a, b)) not in slow_pairs:
            chosen.append((a, b))
            used |= {a, b}
    return chosen


def _values(measurements: Sequence[Measurement]) -> dict[tuple[str, int], list[float]]:
    """Per (check, size): the fleet's sample, one value per host (per host and rail for rails):
    its best measurement, so a healthy host paired with a bad one still counts as healthy and
    the median stands while fewer than half of the hosts are bad."""
    best: dict[tuple[str, int], dict[tuple[str, int | None], float]] = {}
    for m in measurements:
        if m.check in ("intra", "pair", "rail"):
            per_host = best.setdefault((m.check, m.size_bytes), {})
            for host in m.hosts:
                per_host[(host, m.rail)] = max(per_host.get((host, m.rail), 0.0), m.busbw_GBps)
    return {key: list(values.values()) for key, values in best.items()}


def _noise(measurements: Sequence[Measurement]) -> dict[tuple[str, int], float]:
    """Per (check, size): the relative standard error of a ratio of two of its medians."""
    found: dict[tuple[str, int], list[float]] = {}
    for m in measurements:
        if m.check in ("intra", "pair", "rail") and m.noise > 0:
            found.setdefault((m.check, m.size_bytes), []).append(m.noise)
    return {key: ratio_noise(values) for key, values in found.items()}


def _control_values(measured: Round, measurements: Sequence[Measurement]) -> dict[tuple[str, int], float]:
    """Per (check, size): the median busbw of the round's control groups (0 where a control
    measured a wrong result: no control then)."""
    found: dict[tuple[str, int], list[float]] = {}
    for m in measurements:
        if m.hosts in measured.controls:
            found.setdefault((m.check, m.size_bytes), []).append(m.busbw_GBps)
    medians = {key: statistics.median(values) for key, values in found.items()}
    return {key: value for key, value in medians.items() if value > 0}
