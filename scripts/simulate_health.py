#!/usr/bin/env python
"""Health's verdicts at scale, simulated: the real planner, decisions and verdicts of
allreduce_bench/health (rounds.py, decide.py, reference.py, verdicts.py, plan.py) on a modelled
fleet, with no torch and no process.

    python scripts/simulate_health.py --hosts 64,1024,4096 --trials 100 [--json]

Each measurement (a host's intra AllReduce, a pair's, each rail's, a bisection half's) reads
nominal busbw x the group's true speed x its moment x exp(cv z), z ~ N(0, 1), at each of the
GPU sizes (health/config.py). The true speed of a group is its slowest member's (a collective
runs at the pace of its slowest rank). In every round each host is, with probability
--load-share, under a passing moment of load that slows everything it measures in that round
by --load-slowdown (a share of its busbw). Faults, put in on purpose, each on random hosts:

  clean          none
  bad-host-K     K hosts (K = 1, 8, 64; at most N/8, the fleet median's design limit) at half
                 their pair and rail busbw (a NIC or PCIe link trained down)
  bad-rail       one host's one rail at half its busbw
  bad-link       the link between two good hosts at half its busbw, on the first matching (the
                 only links a quick check is sure to measure; others need --pairs all)
  unreachable    one host stops answering from the first round on
  slow-at-scale  one host at half speed in groups of more than two hosts only (with --bisect)

Per (hosts, case), over --trials trials: faults put in, hits (a faulty host named slow or bad,
the rail named, the link named and confirmed, the frozen host named unreachable, the slow-at-
scale host narrowed by the bisection to a group of at most 4 hosts: it is fine in pairs, so the
last halves of 2 hosts read alike), misses, false alarms (a
healthy host named slow, bad, dead or unreachable, or a healthy link named), hosts `not
judged`, the rounds the check took (median) and its wall time by --dry-run's estimate at the
GPU defaults (health/plan.py) for the rounds it ran. The defaults of the noise (doc/health.md,
"Health at scale, simulated"): --cv 0.03, the per-NIC spread of nccl-tests' busbw (46-49 GB/s
on one 400 Gb/s fabric) with room; --load-share 0.01 and --load-slowdown 0.5, a moment on 1 in
100 hosts per round that halves its busbw. Progress goes to stderr; bad input is one line and
exit 2.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from allreduce_bench.health.config import GPU_SIZES, health_sampling
from allreduce_bench.health.decide import Measurement
from allreduce_bench.health.plan import costs, step_s
from allreduce_bench.health.reference import Reference
from allreduce_bench.health.rounds import HealthCheck, Round
from allreduce_bench.health.verdicts import NOT_JUDGED, verdicts

CASES = ("clean", "bad-host-1", "bad-host-8", "bad-host-64", "bad-rail", "bad-link", "unreachable",
         "slow-at-scale")
NOMINAL_GBPS = {"intra": 350.0, "inter": 45.0}  # health/plan.py's H100 node: NVLink, a 400 Gb/s rail
LATENCY_SHARE = 0.05  # busbw at the latency size, as a share of the bandwidth size's
FAULT = 0.5  # a faulty host, rail or link runs at half its busbw
DEFAULT_CV, DEFAULT_LOAD_SHARE, DEFAULT_LOAD_SLOWDOWN = 0.03, 0.01, 0.5
NAMED = ("slow", "bad", "dead", "unreachable")


@dataclass
class Fleet:
    """The modelled fleet of one trial: true speeds, faults, the noise, the moments of load."""

    hosts: list[str]
    ranks_per_node: int
    cv: float
    load_share: float
    load_slowdown: float
    rng: np.random.Generator
    host: dict[str, float] = field(default_factory=dict)  # pair and rail speed of a bad host
    rail: dict[tuple[str, int], float] = field(default_factory=dict)
    link: dict[frozenset, float] = field(default_factory=dict)
    at_scale: dict[str, float] = field(default_factory=dict)  # speed in groups of > 2 hosts only
    frozen: set[str] = field(default_factory=set)

    def _moments(self) -> dict[str, float]:
        """This round's hosts under a moment of load -> their speed in it."""
        loaded = np.flatnonzero(self.rng.random(len(self.hosts)) < self.load_share)
        return {self.hosts[i]: 1.0 - self.load_slowdown for i in loaded}

    def _channels(self, kind: str, group: tuple[str, ...]) -> list[tuple[str, int | None, float]]:
        """(check, rail, true speed) of everything a group measures in a round of `kind`."""
        if kind == "intra":
            return [("intra", None, NOMINAL_GBPS["intra"])]
        if kind == "bisect":
            nominal = NOMINAL_GBPS["inter" if len(group) > 1 else "intra"]
            scale = min((self.at_scale.get(h, 1.0) for h in group), default=1.0) if len(group) > 2 else 1.0
            return [("bisect", None, nominal * scale * min(self.host.get(h, 1.0) for h in group))]
        a, b = group
        base = min(self.host.get(a, 1.0), self.host.get(b, 1.0), self.link.get(frozenset(group), 1.0))
        rails = [min(base, self.rail.get((a, r), 1.0), self.rail.get((b, r), 1.0))
                 for r in range(self.ranks_per_node)]
        out: list[tuple[str, int | None, float]] = [("pair", None, NOMINAL_GBPS["inter"] * min(rails))]
        if self.ranks_per_node > 1:
            out += [("rail", r, NOMINAL_GBPS["inter"] * f) for r, f in enumerate(rails)]
        return out

    def measure(self, planned: Round) -> list[Measurement]:
        moments = self._moments()
        rows = []
        for group in planned.groups:
            if set(group) & self.frozen:
                continue
            moment = min((moments.get(h, 1.0) for h in group), default=1.0)
            rows += [(group, check, rail, speed * moment) for check, rail, speed in self._channels(planned.kind, group)]
        sizes = GPU_SIZES
        noise = np.exp(self.cv * self.rng.standard_normal((len(rows), len(sizes))))
        out = []
        for (group, check, rail, speed), factors in zip(rows, noise.tolist()):
            for size, factor in zip(sizes, factors):
                value = speed * (1.0 if size == sizes[-1] else LATENCY_SHARE) * factor
                out.append(Measurement(planned.index, check, group, rail, size, value, size / value / 1e3, self.cv))
        return out


def names(n: int) -> list[str]:
    width = len(str(n - 1))
    return [f"node{i:0{width}d}" for i in range(n)]


def put_faults(fleet: Fleet, case: str) -> dict:
    """Put the case's faults on random hosts; what a hit must name."""
    rng, hosts = fleet.rng, fleet.hosts
    if case.startswith("bad-host-"):
        k = min(int(case.rsplit("-", 1)[1]), len(hosts) // 8)  # the design's limit: N/8 (reference.py)
        chosen = [hosts[i] for i in rng.choice(len(hosts), k, replace=False)]
        fleet.host.update({h: FAULT for h in chosen})
        return {"hosts": set(chosen)}
    if case == "bad-rail":
        host, rail = hosts[rng.integers(len(hosts))], int(rng.integers(fleet.ranks_per_node))
        fleet.rail[(host, rail)] = FAULT
        return {"rails": {(host, rail)}, "faulty": {host}}
    if case == "bad-link":  # on a link the quick check measures: one of its first matching's
        i = int(rng.integers(len(hosts) // 2))
        a, b = hosts[i], hosts[len(hosts) - 1 - i]
        fleet.link[frozenset((a, b))] = FAULT
        return {"links": {frozenset((a, b))}}
    if case in ("unreachable", "slow-at-scale"):
        host = hosts[rng.integers(len(hosts))]
        if case == "unreachable":
            fleet.frozen.add(host)
        else:
            fleet.at_scale[host] = FAULT
        return {case: {host}}
    return {}


def run_check(fleet: Fleet, bisect: bool) -> tuple[HealthCheck, dict]:
    """The real check's loop (health/benchmark.py's coordinator, without processes)."""
    check = HealthCheck(fleet.hosts, fleet.ranks_per_node, Reference(GPU_SIZES), "quick", bisect)
    while (planned := check.next_round()) is not None:
        frozen = [h for g in planned.groups for h in g if h in fleet.frozen]
        check.record(planned, fleet.measure(planned), frozen)
    return check, verdicts(check)


def score(check: HealthCheck, found: dict, truth: dict) -> dict:
    """faults, hits and false alarms of one trial."""
    by_host = {h["host"]: h["verdict"] for h in found["hosts"]}
    named = {h for h, v in by_host.items() if v in NAMED}
    links = {frozenset(p["hosts"]) for p in found["pairs"]
             if p["verdict"] != "ok" and p.get("link") and p.get("confirmed")}
    faulty = set(truth.get("hosts", ())) | set(truth.get("faulty", ())) | set(truth.get("slow-at-scale", ()))
    hits = sum(by_host[h] in ("slow", "bad") for h in truth.get("hosts", ()))
    hits += sum(any(r["host"] == h and r["rail"] == rail and r["verdict"] in ("slow", "bad")
                    for r in found["rails"]) for h, rail in truth.get("rails", ()))
    hits += len(links & set(truth.get("links", ())))
    hits += sum(by_host[h] == "unreachable" for h in truth.get("unreachable", ()))
    suspects = set(check.bisection.as_json()["suspects"]) if check.bisection else set()
    hits += sum(h in suspects and len(suspects) <= 4 for h in truth.get("slow-at-scale", ()))
    frozen = set(truth.get("unreachable", ()))
    faults = sum(len(v) for k, v in truth.items() if k != "faulty")
    return {"faults": faults, "hits": hits, "misses": faults - hits,
            "false_alarms": len(named - faulty - frozen) + len(links - set(truth.get("links", ()))),
            "not_judged": sum(v == NOT_JUDGED for v in by_host.values()), "rounds": len(check.rounds)}


def wall_s(check: HealthCheck, ranks_per_node: int) -> float:
    """--dry-run's estimate (health/plan.py, GPU defaults) of the rounds this check ran."""
    cost, sampling, L = costs("cuda"), health_sampling("cuda", None, None), ranks_per_node
    seconds = cost.start_s
    for r in check.rounds:
        if r.kind == "intra":
            seconds += cost.round_s + step_s(L, cost.intra_GBps, GPU_SIZES, sampling, cost.latency_s)
        elif r.kind == "pairs":
            seconds += cost.round_s + step_s(2 * L, cost.inter_GBps, GPU_SIZES, sampling, cost.latency_s) + (
                step_s(2, cost.inter_GBps, GPU_SIZES, sampling, cost.latency_s) if L >= 2 else 0.0)
        else:
            ranks = max(len(g) for g in r.groups) * L
            seconds += cost.round_s + step_s(ranks, cost.inter_GBps, GPU_SIZES, sampling, cost.latency_s)
    return seconds


def simulate(hosts: int, case: str, args: argparse.Namespace, progress=None) -> dict:
    """One (hosts, case) over args.trials trials: the JSON line's fields."""
    totals = {"faults": 0, "hits": 0, "misses": 0, "false_alarms": 0, "not_judged": 0}
    rounds, walls = [], []
    for trial in range(args.trials):
        rng = np.random.default_rng([args.seed, hosts, CASES.index(case), trial])
        fleet = Fleet(names(hosts), args.gpus_per_node, args.cv, args.load_share, args.load_slowdown, rng)
        truth = put_faults(fleet, case)
        check, found = run_check(fleet, bisect=case == "slow-at-scale")
        scored = score(check, found, truth)
        for key in totals:
            totals[key] += scored[key]
        rounds.append(scored["rounds"])
        walls.append(wall_s(check, args.gpus_per_node))
        if progress:
            progress(trial + 1)
    return {"hosts": hosts, "case": case, "trials": args.trials, **totals,
            "false_alarms_per_check": totals["false_alarms"] / args.trials,
            "rounds_median": statistics.median(rounds), "rounds_max": max(rounds),
            "wall_s_estimate": round(statistics.median(walls), 1), "gpus_per_node": args.gpus_per_node,
            "cv": args.cv, "load_share": args.load_share, "load_slowdown": args.load_slowdown, "seed": args.seed}


HEADER = (f"{'hosts':>6} {'case':<14} {'trials':>6} {'faults':>6} {'hits':>6} {'misses':>6} {'false':>6} "
          f"{'false/check':>11} {'not judged':>10} {'rounds':>6} {'max':>4} {'wall s':>7}")


def table_row(row: dict) -> str:
    return (f"{row['hosts']:>6} {row['case']:<14} {row['trials']:>6} {row['faults']:>6} {row['hits']:>6} "
            f"{row['misses']:>6} {row['false_alarms']:>6} {row['false_alarms_per_check']:>11.3f} "
            f"{row['not_judged']:>10} {row['rounds_median']:>6g} {row['rounds_max']:>4} {row['wall_s_estimate']:>7.1f}")


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Simulate allreduce-bench health's verdicts on a fleet of thousands of hosts "
                    "(the real decision code, modelled measurements).",
        epilog="Defaults justified in doc/health.md (Health at scale, simulated).")
    parser.error = lambda message: parser.exit(2, f"simulate_health.py: {message}\n")  # type: ignore[method-assign]
    parser.add_argument("--hosts", type=_int_list, action="append",
                        help="fleet size(s), repeatable or comma-separated [64,1024,4096]")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="ranks (GPUs, rails) per host [8]")
    parser.add_argument("--trials", type=int, default=100, help="trials per (hosts, case) [100]")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)} [all]")
    parser.add_argument("--seed", type=int, default=0, help="random seed [0]")
    parser.add_argument("--cv", type=float, default=DEFAULT_CV,
                        help=f"each measurement's relative spread [{DEFAULT_CV}]")
    parser.add_argument("--load-share", type=float, default=DEFAULT_LOAD_SHARE,
                        help=f"share of hosts under a passing moment of load in each round [{DEFAULT_LOAD_SHARE}]")
    parser.add_argument("--load-slowdown", type=float, default=DEFAULT_LOAD_SLOWDOWN,
                        help=f"share of its busbw such a moment takes from a host [{DEFAULT_LOAD_SLOWDOWN}]")
    parser.add_argument("--json", action="store_true", help="one JSON object per line per (hosts, case)")
    args = parser.parse_args(argv)
    args.hosts = [n for group in (args.hosts or [[64, 1024, 4096]]) for n in group]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    problem = _problem(args)
    if problem:
        parser.exit(2, f"simulate_health.py: {problem}\n")
    return args


def _problem(args: argparse.Namespace) -> str | None:
    unknown = [c for c in args.cases if c not in CASES]
    if unknown or not args.cases:
        return f"--cases: unknown {', '.join(unknown) or 'nothing'}; choose from {', '.join(CASES)}"
    if not args.hosts or min(args.hosts) < 4:
        return "--hosts: each fleet needs at least 4 hosts"
    if args.gpus_per_node < 1 or args.trials < 1:
        return "--gpus-per-node and --trials must be at least 1"
    if not (0 <= args.cv <= 1 and 0 <= args.load_share <= 1 and 0 <= args.load_slowdown < 1):
        return "--cv and --load-share must be in [0, 1], --load-slowdown in [0, 1)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.json:
        print(f"{args.gpus_per_node} GPUs per host, cv {args.cv:g}, load share {args.load_share:g}, "
              f"load slowdown {args.load_slowdown:g}, seed {args.seed}")
        print(HEADER)
    for hosts in args.hosts:
        for case in args.cases:
            began = time.monotonic()

            def progress(done: int, hosts=hosts, case=case, began=began) -> None:
                if time.monotonic() - began > 5 and (done % max(1, args.trials // 10) == 0 or done == args.trials):
                    print(f"  {hosts} hosts, {case}: {done}/{args.trials} trials, "
                          f"{time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)

            row = simulate(hosts, case, args, progress)
            print(json.dumps(row) if args.json else table_row(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
