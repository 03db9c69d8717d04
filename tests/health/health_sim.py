"""A simulated cluster for the health check's decisions: hosts, rails and links with true
speeds, measured with multiplicative Gaussian noise. No processes; thousands of hosts."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from allreduce_bench.health.decide import Measurement
from allreduce_bench.health.reference import Reference
from allreduce_bench.health.rounds import HealthCheck, Round
from allreduce_bench.health.verdicts import verdicts

SIZES = (4 << 10, 4 << 20)
NOMINAL_GBPS = {"intra": 100.0, "pair": 20.0, "rail": 20.0, "bisect": 20.0}
LATENCY_SHARE = 0.05  # busbw at the small size, as a share of the large size's


@dataclass
class SimCluster:
    hosts: list[str]
    ranks_per_node: int = 1
    noise: float = 0.10
    seed: int = 0
    host: dict[str, float] = field(default_factory=dict)  # slow NIC / host: factor < 1
    intra: dict[str, float] = field(default_factory=dict)
    rail: dict[tuple[str, int], float] = field(default_factory=dict)
    link: dict[frozenset, float] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)  # stop answering from the first round on
    # moments of load, not faults: every group of a round slowed (round -> factor), or the
    # groups of one host in one round ((round, host) -> factor)
    load: dict[int, float] = field(default_factory=dict)
    moments: dict[tuple[int, str], float] = field(default_factory=dict)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def _value(self, check: str, size: int, factor: float) -> float:
        scale = 1.0 if size == max(SIZES) else LATENCY_SHARE
        return NOMINAL_GBPS[check] * scale * factor * max(0.05, 1 + self.rng.gauss(0, self.noise))

    def _rails(self, a: str, b: str, base: float) -> list[float]:
        return [min(base, self.rail.get((a, r), 1.0), self.rail.get((b, r), 1.0))
                for r in range(self.ranks_per_node)]

    def measure(self, round: Round) -> list[Measurement]:
        out = []
        for group in round.groups:
            if set(group) & self.frozen:
                continue
            if round.kind == "intra":
                channels = [("intra", None, self.intra.get(group[0], 1.0))]
            elif round.kind == "pairs":
                a, b = group
                base = min(self.host.get(a, 1.0), self.host.get(b, 1.0), self.link.get(frozenset(group), 1.0))
                rails = self._rails(a, b, base)
                channels = [("pair", None, min(rails))]
                if self.ranks_per_node > 1:
                    channels += [("rail", r, f) for r, f in enumerate(rails)]
            else:
                channels = [("bisect", None, min(self.host.get(h, 1.0) for h in group))]
            moment = self.load.get(round.index, 1.0) * min(self.moments.get((round.index, h), 1.0) for h in group)
            for check, rail, factor in channels:
                for size in SIZES:
                    value = self._value(check, size, factor * moment)
                    out.append(Measurement(round.index, check, tuple(group), rail, size, value,
                                           size / value / 1e3))
        return out

    def run(self, mode: str = "quick", bisect: bool = False, expect=None) -> tuple[HealthCheck, dict]:
        check = HealthCheck(self.hosts, self.ranks_per_node, Reference(SIZES, expect), mode, bisect)
        while (planned := check.next_round()) is not None:
            frozen = [h for g in planned.groups for h in g if h in self.frozen]
            check.record(planned, self.measure(planned), frozen)
        return check, verdicts(check)


def names(n: int) -> list[str]:
    width = len(str(n - 1))
    return [f"node{i:0{width}d}" for i in range(n)]


def random_faults(cluster: SimCluster, bad_hosts: int, bad_rails: int, bad_links: int,
                  intra_bad: int = 0) -> tuple[set[str], set[tuple[str, int]]]:
    """Put faults on distinct random hosts; returns (bad hosts, bad rails) to be found."""
    rng = random.Random(cluster.seed + 1)
    chosen = rng.sample(cluster.hosts, bad_hosts + bad_rails + intra_bad)
    for h in chosen[:bad_hosts]:
        cluster.host[h] = 0.25
    rails = set()
    for h in chosen[bad_hosts:bad_hosts + bad_rails]:
        r = rng.randrange(cluster.ranks_per_node)
        cluster.rail[(h, r)] = 0.25
        rails.add((h, r))
    for h in chosen[bad_hosts + bad_rails:]:
        cluster.intra[h] = 0.25
    for _ in range(bad_links):
        a, b = rng.sample(cluster.hosts, 2)
        cluster.link[frozenset((a, b))] = 0.25
    return set(chosen), rails
