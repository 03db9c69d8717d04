"""Verdicts per host, rail (host, local rank) and pair: `ok`, `slow`, `bad`, `unreachable`,
`dead` or `not judged`, each with measured vs expected busbw and why. `ok` needs evidence: a
measurement judged against a threshold; a host never so measured is `not judged`, and so is one
slow in separate moments only (decide.py `proven`). A confirmed host or link is `bad` under
BAD_FRACTION of expected and `slow` above it; `dead` (its process
died) comes from whoever saw it (health/salvage.py); the exit code follows from the hosts."""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from allreduce_bench.health.decide import (
    Channel,
    HostState,
    Measurement,
    PairResult,
    channel_of,
    controlled_link,
    link_findings,
)
from allreduce_bench.health.reference import BAD_FRACTION, Reference
from allreduce_bench.health.rounds import HealthCheck

VERDICTS = ("ok", "slow", "bad", "unreachable", "dead", "not judged")
NOT_JUDGED = "not judged"  # neither healthy nor named: listed apart, for a scheduler to re-check
# held back by the host itself (core/host/cgroups.py, gpus.py): a CPU quota under MIN_CPUS_PER_RANK for
# each rank sharing it (a rank drives its collective, NCCL's proxy and its launches from a CPU),
# or throttled in THROTTLED_PERIODS CFS periods and THROTTLED_S seconds (runnable but stopped;
# a clean run has no quota at all); GPU clock reasons that are faults, not a power cap
MIN_CPUS_PER_RANK, THROTTLED_PERIODS, THROTTLED_S = 1.0, 3, 0.05
GPU_FAULT_EVENTS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
HEALTHY, UNHEALTHY, BAD_INPUT, INCOMPLETE = 0, 3, 2, 1  # exit codes


def _worst(ms: Sequence[Measurement], reference: Reference) -> dict:
    """The size to show for these measurements (one check): of the sizes they were slow at
    (each against its own round's expectation: the fleet's, or a control's), the one furthest
    under; where none was slow, the bandwidth size (the largest), so an `ok` row shows the
    same size as the others. `ratio`: the median of measured / expected over the measurements."""
    by_size: dict[int, list[Measurement]] = {}
    for m in ms:
        by_size.setdefault(m.size_bytes, []).append(m)
    shown: list[dict] = []
    for size, group in sorted(by_size.items()):
        threshold = reference.get(group[0].check, size)
        ratios = [m.busbw_GBps / t.expected_GBps for m in group
                  if (t := reference.get(m.check, size, m.round)) is not None and t.expected_GBps]
        shown.append({"size_bytes": size, "measured_GBps": statistics.median(m.busbw_GBps for m in group),
                      "expected_GBps": threshold.expected_GBps if threshold else None,
                      "threshold_GBps": threshold.threshold_GBps if threshold else None,
                      "ratio": statistics.median(ratios) if ratios else 1.0,
                      "slow": any(reference.slow(m.check, size, m.busbw_GBps, m.round) for m in group)})
    slow = [row for row in shown if row["slow"]]
    return min(slow, key=lambda row: row["ratio"]) if slow else shown[-1] if shown else {}


def _severity(ratio: float) -> str:
    return "bad" if ratio < BAD_FRACTION else "slow"


def _name(channel: Channel) -> str:
    check, rail = channel
    return f"rail {rail}" if check == "rail" else {"pair": "the pair AllReduce",
                                                  "intra": "the intra AllReduce"}[check]


def _host_channel_ms(host: str, channel: Channel, results: Sequence[PairResult],
                     partners: Sequence[str], intra: Sequence[Measurement]) -> list[Measurement]:
    """The measurements of one host's channel: `results` and `intra`, the host's own (verdicts
    indexes them per host once, so a fleet of thousands is judged in linear time)."""
    if channel[0] == "intra":
        return [m for m in intra if m.hosts == (host,)]
    return [m for r in results if host in r.hosts and r.partner(host) in partners
            for m in r.measurements if channel_of(m) == channel]


def host_verdict(state: HostState, check: HealthCheck, results, intra, complete: bool = True) -> dict:
    """One host's verdict; `results` and `intra`: its own pair results and intra measurements."""
    host, ref = state.host, check.reference
    out = {"host": host, "partners": sorted(state.tried)}
    if state.status == "unreachable":
        return {**out, "verdict": "unreachable", "measured_GBps": None, "expected_GBps": None,
                "why": "never joined: not every rank of it came within the timeout" if check.unreachable[host] == 0
                else f"did not answer within the timeout in round {check.unreachable[host]}"}
    if state.status == "faulty":
        # a slow rail slows the whole pair too: name the rail, the most specific finding
        named = [c for c in state.channels if c[0] == "rail"] or list(state.channels)
        worst = min((_worst(_host_channel_ms(host, c, results, state.slow_with, intra), ref) | {"channel": c}
                     for c in sorted(named, key=str)), key=lambda w: w["ratio"])
        intra = worst["channel"][0] == "intra"
        partners = sorted(set(state.slow_with))
        with_whom = "" if intra else f" with {len(partners)} known-good partners ({', '.join(partners)})" + (
            f", {len(state.slow_with)} times" if len(state.slow_with) > len(partners) else "")
        if not state.proven:  # two slow moments, nothing of the same moment to compare
            return {**out, **_public(worst), "verdict": NOT_JUDGED, "check": _name(worst["channel"]),
                    "control": False,
                    "why": f"{_name(worst['channel'])} slow{with_whom} in separate rounds, against the fleet's "
                           "median only; not measured again, with no control pair of known-good hosts free: "
                           "a moment of load is not ruled out"}
        return {**out, **_public(worst), "verdict": _severity(worst["ratio"]), "check": _name(worst["channel"]),
                "control": state.controlled,
                "why": f"{_name(worst['channel'])} slow{with_whom}{_confidence(state.controlled, intra, state.again)}"}
    mine = [m for r in results if host in r.hosts for m in r.measurements if m.check == "pair"]
    mine = mine or [m for m in intra if m.hosts == (host,)]
    worst = _worst(mine, ref) if mine else {}
    if state.status == "unconfirmed":
        return {**out, **_public(worst), "verdict": "ok",
                "why": f"slow with {', '.join(state.slow_with)} but on another check each time: "
                       "noise, not confirmed"}
    if state.status == "suspect" and not complete:
        return {**out, **_public(worst), "verdict": NOT_JUDGED,
                "why": f"slow with {', '.join(sorted(state.tried))} once; the check stopped before "
                       "it was measured again"}
    if state.status == "suspect":
        return {**out, **_public(worst), "verdict": "slow",
                "why": f"slow with {', '.join(sorted(state.tried))}; not confirmed: no further "
                       "known-good partner to tell it apart"}
    # evidence: a pair (with other hosts to pair with) or intra measurement judged by a threshold
    evidence = [m for m in mine if m.check == "pair" or len(check.hosts) == 1]
    if not any(ref.get(m.check, m.size_bytes, m.round) for m in evidence):
        return {**out, **_public(worst), "verdict": NOT_JUDGED,
                "why": "measured, but the check stopped before a threshold to judge it by" if evidence
                else "no pair measured: no partner was available"}
    why = "fine with " + ", ".join(state.ok_with) if state.ok_with else "intra check only (a world of one host)"
    return {**out, **_public(worst), "verdict": "ok", "why": why}


def _confidence(controlled: bool, intra: bool = False, again: bool = False) -> str:
    """How sure a finding is: re-measured beside a control of the same moment, or not."""
    control = "a host found fine" if intra else "a control pair of known-good hosts"
    if controlled:
        return f", and again beside {control} measured at the same time"
    return (f"; not re-measured beside {control} (none free): judged against the fleet's median only"
            + (", and slow again when measured once more" if again else ""))


def holdback(per_rank: dict[int, dict] | None) -> dict | None:
    """A host's ranks' throttling as one: the smallest CPU share per rank (a quota divided by
    the ranks that share its cgroup), the most throttling any rank saw, every GPU reason."""
    if not per_rank:
        return None
    limited = [f for f in per_rank.values() if f.get("quota_cpus") is not None]
    sharing = Counter(f.get("cgroup") for f in limited)  # ranks under one quota share it
    shares = [f["quota_cpus"] / sharing[f.get("cgroup")] for f in limited]
    return {"cpus_per_rank": round(min(shares), 4) if shares else None,
            "nr_throttled": max(int(f.get("nr_throttled", 0)) for f in per_rank.values()),
            "throttled_s": max(float(f.get("throttled_s", 0.0)) for f in per_rank.values()),
            "gpu_events": sorted({e for f in per_rank.values() for e in f.get("gpu_events", ())})}


def held_back_why(found: dict | None) -> str | None:
    """Why a host was held back (holdback's summary), or None where nothing did."""
    if not found:
        return None
    said = []
    share, periods, seconds = found.get("cpus_per_rank"), found["nr_throttled"], found["throttled_s"]
    throttled = periods >= THROTTLED_PERIODS and seconds >= THROTTLED_S
    if (share is not None and share < MIN_CPUS_PER_RANK) or throttled:
        quota = f"a CPU quota of {share:g} CPU per rank" if share is not None else "a CPU quota"
        said.append(f"held back by {quota}: throttled in {periods} CFS period(s) ({seconds:.2f} s) "
                    "during the check")
    events = [e for e in found.get("gpu_events", ()) if e in GPU_FAULT_EVENTS]
    if events:
        said.append(f"GPU clocks held back: {', '.join(events)} (nvidia-smi)")
    return "; ".join(said) or None


def with_holdback(verdict: dict, per_rank: dict[int, dict] | None) -> dict:
    """A host held back is at least `slow`, whatever its timing said (on shared cores its
    neighbours get no more CPU than its quota, so timing alone may not tell it apart)."""
    found = holdback(per_rank)
    why = held_back_why(found)
    if found:
        verdict = {**verdict, "held_back": found}
    if why is None or verdict["verdict"] == "unreachable":
        return verdict
    if verdict["verdict"] == "ok":
        return {**verdict, "verdict": "slow", "check": "throttling", "why": f"{why} ({verdict['why']})"}
    return {**verdict, "why": f"{verdict['why']}; {why}"}


def _public(worst: dict) -> dict:
    return {k: worst.get(k) for k in ("size_bytes", "measured_GBps", "expected_GBps", "threshold_GBps")}


def rail_verdicts(states: dict[str, HostState], check: HealthCheck,
                  results_of: dict[str, list[PairResult]]) -> list[dict]:
    rows = []
    for host, state in states.items():
        results = results_of.get(host, [])
        for rail in range(check.ranks_per_node):
            channel = ("rail", rail)
            faulty = state.status == "faulty" and channel in state.channels
            partners = state.slow_with if faulty else (state.ok_with or sorted(state.tried))
            ms = _host_channel_ms(host, channel, results, partners, ())
            worst = _worst(ms, check.reference) if ms else {}
            verdict = ("unreachable" if state.status == "unreachable" else NOT_JUDGED if faulty and not state.proven
                       else _severity(worst.get("ratio", 0.0)) if faulty else "ok")
            why = (f"rail {rail} slow with {', '.join(partners)}"
                   + ("; not proven beyond a moment of load (see its host)" if verdict == NOT_JUDGED else "")
                   if faulty else
                   "host unreachable" if verdict == "unreachable" else
                   f"fine with {', '.join(partners) or 'nobody measured'}")
            rows.append({"host": host, "rail": rail, "verdict": verdict, **_public(worst), "why": why})
    return rows


def pair_verdicts(states: dict[str, HostState], check: HealthCheck, results) -> list[dict]:
    links = link_findings(results, states, check.confirmations())
    rows = []
    for r in results:
        base = {"hosts": list(r.hosts), "round": r.round,
                "busbw_GBps": {str(m.size_bytes): m.busbw_GBps for m in r.measurements if m.check == "pair"}}
        finding = links.get(frozenset(r.hosts))
        if not r.slow or finding == "noise":
            whole = [m for m in r.measurements if m.check == "pair"]
            why = "fine" if not r.slow else "slow once, fine when measured again: noise"
            rows.append({**base, "verdict": "ok", **_public(_worst(whole, check.reference)), "why": why})
            continue
        channels = sorted({(c, rail) for c, rail, _ in r.slow}, key=str)
        worst = min((_worst([m for m in r.measurements if channel_of(m) == c], check.reference) | {"channel": c}
                     for c in channels), key=lambda w: w["ratio"])
        rows.append({**base, "verdict": _severity(worst["ratio"]), "check": _name(worst["channel"]),
                     "link": finding is not None, "confirmed": finding != "suspect", **_public(worst),
                     "why": _pair_why(r, states, finding, _name(worst["channel"]),
                                      controlled_link(results, frozenset(r.hosts), check.reference))})
    return rows


def _pair_why(r: PairResult, states: dict[str, HostState], finding: str | None, what: str,
              controlled: bool = False) -> str:
    if finding == "confirmed":
        return (f"{what} slow each time while both hosts are fine elsewhere: the link or path"
                + _confidence(controlled))
    if finding == "suspect":
        return f"{what} slow once while both hosts are fine elsewhere; not measured again (round budget)"
    blamed = [h for h in r.hosts if states[h].status not in ("good", "unconfirmed")]
    return f"{what} slow: {' and '.join(blamed) or 'a host'} slow with other partners too"


def verdicts(check: HealthCheck, complete: bool = True) -> dict:
    """hosts, rails (with >= 2 ranks per host) and pairs, as health.json lists them (a check
    not complete calls a host slow once `not judged`: it was to be measured again)."""
    states = check.states()
    results = check.results()
    results_of: dict[str, list[PairResult]] = {}
    for r in results:
        for h in r.hosts:
            results_of.setdefault(h, []).append(r)
    intra_of: dict[str, list[Measurement]] = {}
    for m in check.measurements:
        if m.check == "intra":
            intra_of.setdefault(m.hosts[0], []).append(m)
    hosts = [with_holdback(host_verdict(states[h], check, results_of.get(h, []), intra_of.get(h, []), complete),
                           check.holdbacks.get(h)) for h in check.hosts]
    rails = rail_verdicts(states, check, results_of) if check.ranks_per_node > 1 else []
    return {"hosts": hosts, "rails": rails, "pairs": pair_verdicts(states, check, results)}


def named(host: dict) -> bool:
    """Whether a host's verdict names it unhealthy (`not judged` names nobody)."""
    return host["verdict"] not in ("ok", NOT_JUDGED)


def exit_code(hosts: Sequence[dict], pairs: Sequence[dict] = ()) -> int:
    """0 when every host judged and (confirmed) link is ok, 3 when something is unhealthy."""
    unhealthy = any(named(h) for h in hosts) or any(
        p["verdict"] != "ok" and p.get("link") and p.get("confirmed") for p in pairs)
    return UNHEALTHY if unhealthy else HEALTHY
