"""What a health run hands on: health.json, the Slurm exclude, kubectl.sh, the Prometheus textfile,
the terminal summary, and the checks on a --baseline."""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import hostlist

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.text import wrapped
from allreduce_bench.core.units import format_size
from allreduce_bench.health.rounds import HealthCheck
from allreduce_bench.health.verdicts import INCOMPLETE, NOT_JUDGED, UNHEALTHY, VERDICTS, exit_code, named, verdicts


def exclude(hosts: Sequence[dict], verdict=named) -> str:
    """The hosts named unhealthy (or those `verdict` picks) as one hostlist expression, '' when none."""
    return hostlist.collect_hostlist([h["host"] for h in hosts if verdict(h)])


def not_judged(host: dict) -> bool:
    return host["verdict"] == NOT_JUDGED


KUBECTL_FILE = "kubectl.sh"
HEALTH_LABEL = "allreduce-bench.io/health"


def kubectl_lines(hosts: Sequence[dict], meta: dict) -> list[str]:
    """Per host a verdict label and, if named unhealthy, a NoSchedule taint, on its Kubernetes node
    (meta.json's kubernetes_nodes) else its host name; --overwrite: a later check replaces them."""
    nodes = {h: n for h, n in zip(meta.get("hostnames", []), meta.get("kubernetes_nodes", [])) if n}
    lines = []
    for h in hosts:
        node, value = shlex.quote(nodes.get(h["host"], h["host"])), h["verdict"].replace(" ", "-")
        lines.append(f"kubectl label node {node} {HEALTH_LABEL}={value} --overwrite")
        if named(h):
            lines.append(f"kubectl taint node {node} {HEALTH_LABEL}={value}:NoSchedule --overwrite")
    return lines


def write_kubectl(out_dir, doc: dict, meta: dict) -> Path:
    path = Path(out_dir) / KUBECTL_FILE
    path.write_text("#!/bin/sh\n# health's verdicts as node labels and taints (doc/cluster.md#kubernetes)\n"
                    + "".join(line + "\n" for line in kubectl_lines(doc["hosts"], meta)))
    return path


def finish_document(doc: dict) -> dict:
    """A document's exclude lists and exit code from its host verdicts, as they now stand."""
    code = exit_code(doc["hosts"], doc["pairs"])
    return {**doc, "exclude": exclude(doc["hosts"]), "not_judged": exclude(doc["hosts"], not_judged),
            "exit_code": code if doc.get("complete") or code == UNHEALTHY else INCOMPLETE}


def document(check: HealthCheck, layout: dict, complete: bool = True, note: str = "") -> dict:
    """health.json's content (health/store.py adds schema_version and writes it)."""
    return finish_document({"layout": layout, **verdicts(check, complete),
            "rounds": [{**r.as_json(), "seconds": check.seconds.get(r.index)} for r in check.rounds],
            "thresholds": [t.as_json() for t in check.reference.thresholds()],
            "controls": [{"round": k, "check": c, "size_bytes": size, "busbw_GBps": value}
                         for (k, c, size), value in sorted(check.reference.controls.items())],
            "bisect": check.bisection.as_json() if check.bisection else None,
            "complete": complete, "note": note,
            "confidence": confidence(check.reference.thresholds(), max(layout.get("sizes") or [0]))})


def confidence(thresholds, bandwidth_size: int) -> list[str]:
    """Where noise widened a fleet threshold at the bandwidth size past its floor, so an `ok` on a busy
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
    """The document with each unhealthy host's `why` extended by how its NCCL setup differs from the majority's."""
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
    """Gauges per host and rail for node_exporter's textfile collector."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()

    def gauge(name: str, text: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(f"allreduce_bench_health_{name}", text, labels, registry=registry)

    ok = gauge("ok", "1 if the host's verdict is ok", ["host"])
    state = gauge("verdict", "1 for the host's verdict", ["host", "verdict"])
    busbw = gauge("busbw_GBps", "measured busbw at the worst size", ["host"])
    rail_ok = gauge("rail_ok", "1 if the rail's verdict is ok", ["host", "rail"])
    rail_busbw = gauge("rail_busbw_GBps", "measured busbw of the rail", ["host", "rail"])
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
    gauge("unhealthy_hosts", "hosts named unhealthy (not ok, not 'not judged')").set(sum(map(named, doc["hosts"])))
    write_to_textfile(str(path), registry)


def _figure(value) -> str:
    return "-" if value is None else f"{value:.3g} GB/s"


def _size(size_bytes) -> str:
    return "-" if size_bytes is None else format_size(size_bytes)


def summary(doc: dict) -> str:
    """One line per unhealthy host and link, and the ready --exclude."""
    hosts = doc["hosts"]
    bad = [h for h in hosts if h["verdict"] != "ok"]
    unjudged = sum(not_judged(h) for h in hosts)
    lines = [f"health: {len(hosts)} host(s), {sum(h['verdict'] == 'ok' for h in hosts)} ok, "
             + (f"{unjudged} not judged, " if unjudged else "")
             + f"{len(doc['rounds'])} round(s)" + (" (one host: intra check only)" if len(hosts) == 1 else "")]
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
    if doc.get("not_judged"):
        lines.append(f"not judged (check them again): {doc['not_judged']}")
    exclude = (f"--exclude={doc['exclude']}" if doc["exclude"] else
               "nobody named: nothing to exclude" if unjudged else "all hosts healthy: nothing to exclude")
    return wrapped("\n".join(lines)) + "\n" + exclude  # the --exclude whole, to copy
