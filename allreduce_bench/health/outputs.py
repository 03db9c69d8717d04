"""What a health run hands on: the health.json document, the Slurm exclude string, the
Prometheus textfile, the terminal summary, and the checks on a --baseline."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import hostlist

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import format_size
from allreduce_bench.health.rounds import HealthCheck
from allreduce_bench.health.verdicts import VERDICTS, exit_code, verdicts


def exclude(hosts: Sequence[dict]) -> str:
    """Every host not ok as one hostlist expression (node[03,17]); '' when all are ok."""
    return hostlist.collect_hostlist([h["host"] for h in hosts if h["verdict"] != "ok"])


def document(check: HealthCheck, layout: dict, complete: bool = True, note: str = "") -> dict:
    """health.json's content (health/store.py adds schema_version and writes it)."""
    found = verdicts(check)
    code = exit_code(found["hosts"], found["pairs"])
    return {"layout": layout, **found,
            "rounds": [{**r.as_json(), "seconds": check.seconds.get(r.index)} for r in check.rounds],
            "thresholds": [t.as_json() for t in check.reference.thresholds()],
            "controls": [{"round": k, "check": c, "size_bytes": size, "busbw_GBps": value}
                         for (k, c, size), value in sorted(check.reference.controls.items())],
            "bisect": check.bisection.as_json() if check.bisection else None,
            "exclude": exclude(found["hosts"]), "complete": complete, "note": note,
            "confidence": confidence(check.reference.thresholds(), max(layout.get("sizes") or [0])),
            "exit_code": code if complete else 1}


def confidence(thresholds, bandwidth_size: int) -> list[str]:
    """Where the samples' noise widened a fleet threshold at the bandwidth size past its floor:
    how far under the fleet's median a host must be to be flagged, so an `ok` on a busy
    machine is read for what it is."""
    from allreduce_bench.health.reference import K_NOISE, TOLERANCE_FLOOR, under

    lines = []
    for t in thresholds:
        if t.source == "fleet" and t.size_bytes == bandwidth_size and t.tolerance > TOLERANCE_FLOOR + 1e-9:
            noisy = t.noise and under(K_NOISE * t.noise) >= t.tolerance - 1e-9
            lines.append(f"{t.check} checks at {format_size(t.size_bytes)} flag only a group more than "
                         f"{t.tolerance:.0%} under the fleet's median (the floor is {TOLERANCE_FLOOR:.0%}): "
                         + ("the samples were noisy (a median's standard error "
                            f"{t.noise / 2 ** 0.5:.0%}); a quieter machine or a longer --budget narrows it"
                            if noisy else "the fleet's measurements spread that much"))
    return lines


def explain(doc: dict, nccl_block: dict | None) -> dict:
    """The document with each unhealthy host's `why` extended by how its NCCL setup differs
    from the majority's (meta.json's `nccl` block, from --nccl-debug; analysis/nccl_setup.py)."""
    from allreduce_bench.nccl_log.setup import host_differences

    hosts = []
    for h in doc["hosts"]:
        said = host_differences(nccl_block, h["host"]) if h["verdict"] != "ok" else []
        hosts.append({**h, "why": "; ".join([h["why"], *said]), "nccl_differences": said} if said else h)
    return {**doc, "hosts": hosts}


def baseline_thresholds(baseline: dict, ranks_per_node: int, sizes: Sequence[int], where) -> list[dict]:
    """The baseline's thresholds, if it was measured in the same layout at the same sizes."""
    was = baseline.get("layout", {})
    if was.get("ranks_per_node") != ranks_per_node or sorted(was.get("sizes", [])) != sorted(sizes):
        raise UsageError(f"--baseline {where} was measured with {was.get('ranks_per_node')} rank(s) per "
                         f"host at sizes {was.get('sizes')}, this check with {ranks_per_node} at "
                         f"{list(sizes)}; give the same --ranks-per-node and --sizes, or another baseline")
    return [t for t in baseline.get("thresholds", []) if t.get("source") != "too few groups"]


def write_prometheus(path: Path, doc: dict) -> None:
    """Gauges per host and rail for node_exporter's textfile collector (written atomically by
    prometheus-client's write_to_textfile)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()
    ok = Gauge("allreduce_bench_health_ok", "1 if the host's verdict is ok", ["host"], registry=registry)
    state = Gauge("allreduce_bench_health_verdict", "1 for the host's verdict", ["host", "verdict"],
                  registry=registry)
    busbw = Gauge("allreduce_bench_health_busbw_GBps", "measured busbw at the worst size", ["host"],
                  registry=registry)
    rail_ok = Gauge("allreduce_bench_health_rail_ok", "1 if the rail's verdict is ok", ["host", "rail"],
                    registry=registry)
    rail_busbw = Gauge("allreduce_bench_health_rail_busbw_GBps", "measured busbw of the rail",
                       ["host", "rail"], registry=registry)
    for h in doc["hosts"]:
        ok.labels(h["host"]).set(h["verdict"] == "ok")
        for verdict in VERDICTS:
            state.labels(h["host"], verdict).set(h["verdict"] == verdict)
        if h.get("measured_GBps") is not None:
            busbw.labels(h["host"]).set(h["measured_GBps"])
    for r in doc["rails"]:
        rail_ok.labels(r["host"], str(r["rail"])).set(r["verdict"] == "ok")
        if r.get("measured_GBps") is not None:
            rail_busbw.labels(r["host"], str(r["rail"])).set(r["measured_GBps"])
    Gauge("allreduce_bench_health_unhealthy_hosts", "hosts not ok", registry=registry).set(
        sum(h["verdict"] != "ok" for h in doc["hosts"]))
    write_to_textfile(str(path), registry)


def _figure(value) -> str:
    return "-" if value is None else f"{value:.3g} GB/s"


def _size(size_bytes) -> str:
    return "-" if size_bytes is None else format_size(size_bytes)


def summary(doc: dict) -> str:
    """One line per unhealthy host (measured, expected, partners tried), unhealthy links, and
    the ready --exclude."""
    hosts = doc["hosts"]
    bad = [h for h in hosts if h["verdict"] != "ok"]
    lines = [f"health: {len(hosts)} host(s), {len(hosts) - len(bad)} ok, "
             f"{len(doc['rounds'])} round(s)" + (" (one host: intra check only)" if len(hosts) == 1 else "")]
    for h in bad:
        lines.append(f"  {h['host']:<16} {h['verdict'].upper():<11} measured {_figure(h.get('measured_GBps'))} "
                     f"at {_size(h.get('size_bytes'))}, expected {_figure(h.get('expected_GBps'))}; "
                     f"partners {', '.join(h['partners']) or '-'}; {h['why']}")
    said = set()
    for p in doc["pairs"]:  # one line per link: the pairs list has a row per round measured
        if p["verdict"] != "ok" and p.get("link") and frozenset(p["hosts"]) not in said:
            said.add(frozenset(p["hosts"]))
            state = p["verdict"].upper() if p.get("confirmed") else "SUSPECT (not confirmed: exit 0)"
            lines.append(f"  link {' - '.join(p['hosts']):<24} {state} measured "
                         f"{_figure(p['measured_GBps'])} at {_size(p.get('size_bytes'))}, expected "
                         f"{_figure(p['expected_GBps'])}; {p['why']}")
    if doc.get("bisect") and doc["bisect"]["suspects"]:
        lines.append(f"  bisection narrows slowness at scale to {', '.join(doc['bisect']['suspects'])}")
    if doc.get("note"):
        lines.append(f"  note: {doc['note']}")
    lines += [f"  confidence: {line}" for line in doc.get("confidence", ())]
    lines.append(f"--exclude={doc['exclude']}" if doc["exclude"] else "all hosts healthy: nothing to exclude")
    return "\n".join(lines)
