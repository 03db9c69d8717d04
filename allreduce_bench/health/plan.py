"""`health --dry-run`: the rounds a check of N hosts will run, the groups measured side by
side in each, and an estimated wall time, without starting a process.

The estimate adds, per measurement, the calls the timing loop makes (warm-up, calibration, the
samples that fit its budget; measure/timing.py) at the expected busbw plus a per-call latency,
a fixed cost per round (the coordinator's store round trip, every member's group creation)
and the start (launch, imports, the world's rendezvous). The costs per device are
measured on this project's machines (doc/health.md); on a cluster, give the bandwidths with
--expect. A round's measurements of different groups run at once, so a round lasts as long
as one group's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from allreduce_bench.health.decide import CONFIRMATIONS, MAX_CONFIRMATIONS, MIN_MOMENT_SAMPLE
from allreduce_bench.health.reference import MIN_FLEET
from allreduce_bench.health.rounds import QUICK_PAIR_ROUNDS

# device -> (pair/rail busbw GB/s, intra busbw GB/s, per-call latency s, per-round s, start s)
NOMINAL = {
    # the emulator's default link on this 2-core machine (~0.015-0.08 GB/s: 1/36 of the intra
    # p2p measured, which moves with load), loopback inside a host, gloo's ~0.3 ms small
    # AllReduce, ~0.7 s per round of store waits and group creation, and ~14 s to build the
    # namespaces, start torchrun and torch in each, gather meta.json and draw the figure
    # (emulate 4 x 1 end to end, 10 clean runs of scripts/perf_health.py at load 1.6-2.5: median
    # 15.5 s, of which 2 rounds of 0.61-0.91 s; at load 10-13 it took 20.5 s, starts included)
    "cpu": (0.05, 1.0, 3e-4, 0.7, 14.0),
    # an H100 node: 8 x 400 Gb/s rails (~45 GB/s busbw per rail pair), NVLink ~ 350 GB/s busbw,
    # NCCL's ~20 us latency, communicator creation ~1 s per round, ~30 s to start a large job
    "cuda": (45.0, 350.0, 2e-5, 1.0, 30.0),
}


@dataclass(frozen=True)
class PlannedRound:
    kind: str  # intra | pairs | bisect
    groups: int  # groups measured side by side
    ranks_per_group: int
    steps: int  # measured one after the other in each group: (the pair, then its rails) or 1
    when: str  # always | if something is slow
    seconds: float = 0.0

    def line(self, first: int, last: int) -> str:
        rounds = f"round {first}" if first == last else f"rounds {first}-{last}"
        each = " each" if first != last else ""
        return (f"  {rounds:<13} {self.kind:<6} {self.groups:>6} group(s) of {self.ranks_per_group:>3} "
                f"ranks x {self.steps} step(s)  ~{self.seconds:.1f} s{each}  {self.when}")


@dataclass(frozen=True)
class Costs:
    inter_GBps: float
    intra_GBps: float
    latency_s: float
    round_s: float
    start_s: float


def costs(device: str, expect: dict[str, float] | None = None) -> Costs:
    inter, intra, latency, round_s, start = NOMINAL[device]
    expect = expect or {}
    return Costs(expect.get("inter", inter), expect.get("intra", intra), latency, round_s, start)


def measurement_s(call_s: float, sampling) -> float:
    """Seconds the timing loop spends on one measurement whose call lasts call_s."""
    loops = 1 if call_s >= sampling.min_sample_s else math.ceil(1.2 * sampling.min_sample_s / call_s)
    sample_s = loops * call_s
    calibration = call_s + (sample_s if loops > 1 else 0.0)
    samples = sampling.samples or max(sampling.min_samples,
                                      min(sampling.max_samples, int(sampling.budget_s / sample_s)))
    return sampling.warmup * call_s + calibration + samples * sample_s


def step_s(ranks: int, busbw_GBps: float, sizes, sampling, latency_s: float) -> float:
    factor = 2 * (ranks - 1) / ranks
    return sum(measurement_s(latency_s + size * factor / (busbw_GBps * 1e9), sampling) for size in sizes)


def rounds_to_fit(hosts: int) -> int:
    """Circle rounds quick mode measures before the fleet has MIN_FLEET pairs (or all of them)."""
    per_round = hosts // 2
    circle = hosts - 1 if hosts % 2 == 0 else hosts
    return min(circle, math.ceil(MIN_FLEET / per_round)) if per_round else 0


def plan(hosts: int, ranks_per_node: int, mode: str, bisect: bool, sizes, sampling,
         cost: Costs) -> list[PlannedRound]:
    """The rounds, each with its estimated seconds (the round's fixed cost included)."""
    L = ranks_per_node
    out = []
    # from 2 x MIN_MOMENT_SAMPLE hosts on, moments of load as common as the check measures may ask
    # for up to MAX_CONFIRMATIONS slow measurements before a host is named (decide.py)
    more = MAX_CONFIRMATIONS - CONFIRMATIONS if mode == "quick" and hosts >= 2 * MIN_MOMENT_SAMPLE else 0
    if L >= 2:
        intra_s = cost.round_s + step_s(L, cost.intra_GBps, sizes, sampling, cost.latency_s)
        out.append(PlannedRound("intra", hosts, L, 1, "always", intra_s))
        out += [PlannedRound("intra", 1, L, 1, "if an intra check is slow: measured again", intra_s)] * (
            (more + CONFIRMATIONS - 1) if more else 0)
    pair_s = cost.round_s + step_s(2 * L, cost.inter_GBps, sizes, sampling, cost.latency_s) + (
        step_s(2, cost.inter_GBps, sizes, sampling, cost.latency_s) if L >= 2 else 0.0)
    steps = 2 if L >= 2 else 1
    if hosts >= 2:
        certain = rounds_to_fit(hosts) if mode == "quick" else (hosts - 1 if hosts % 2 == 0 else hosts)
        out += [PlannedRound("pairs", hosts // 2, 2 * L, steps, "always", pair_s)] * certain
    if mode == "quick" and hosts >= 4:
        odd = "always (the host that sat out)" if hosts % 2 and certain == 1 else "if a pair is slow"
        extra = max(QUICK_PAIR_ROUNDS, certain + 1) - certain
        out.append(PlannedRound("pairs", 1, 2 * L, steps, odd + ": 2 groups per slow pair", pair_s))
        out += [PlannedRound("pairs", 1, 2 * L, steps, "if both hosts of a slow pair are bad",
                             pair_s)] * (extra - 1)
        out += [PlannedRound("pairs", 1, 2 * L, steps, "if moments ask for a further confirmation", pair_s)] * more
    if bisect and hosts * L >= 2:
        out.append(PlannedRound("bisect", 1, hosts * L, 1, "always", cost.round_s + step_s(
            hosts * L, cost.inter_GBps, sizes, sampling, cost.latency_s)))
        n = hosts
        while (n // 2) * L >= 2:  # the halves side by side; the larger one's time
            out.append(PlannedRound("bisect", 2, (n - n // 2) * L, 1, "if one half is slower",
                                    cost.round_s + step_s((n - n // 2) * L, cost.inter_GBps, sizes,
                                                          sampling, cost.latency_s)))
            n -= n // 2
    return out


def describe(planned: list[PlannedRound], hosts: int, ranks_per_node: int, cost: Costs) -> str:
    """The dry run's text: one line per round, then the estimated wall time."""
    lines = [f"health plan: {hosts} hosts x {ranks_per_node} ranks = {hosts * ranks_per_node} ranks"]
    first = 0
    for i, r in enumerate(planned):  # a run of equal rounds (--pairs all) is one line
        if i + 1 == len(planned) or planned[i + 1] != r:
            lines.append(r.line(first + 1, i + 1))
            first = i + 1
    lines.append(wall_time(planned, cost))
    return "\n".join(lines)


def wall_time(planned: list[PlannedRound], cost: Costs, what: str = "estimated wall time") -> str:
    """'estimated wall time: 18 s when healthy, up to 23 s with re-pairing (the costs)'."""
    always = cost.start_s + sum(r.seconds for r in planned if r.when == "always")
    worst = cost.start_s + sum(r.seconds for r in planned)
    return (f"{what}: {always:.0f} s when healthy, up to {worst:.0f} s with re-pairing "
            f"(start {cost.start_s:.0f} s, {cost.round_s:g} s per round, pair busbw "
            f"{cost.inter_GBps:g} GB/s, intra {cost.intra_GBps:g} GB/s)")
