"""health's kubectl.sh: a label per host, a NoSchedule taint per host named unhealthy, on its
Kubernetes node where meta.json knows it; every line run by kubectl itself (--dry-run=client
against an API server stub, kube_stub.py), which also refuses what Kubernetes would."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kube_stub import api_server, dry_run, needs_kubectl, script_lines
from namespaces import needs_namespaces

from allreduce_bench.health.outputs import HEALTH_LABEL, KUBECTL_FILE, kubectl_lines, write_kubectl

VERDICTS = {"gpu01": "ok", "gpu02": "slow", "gpu03": "bad", "gpu04": "unreachable", "gpu05": "dead",
            "gpu06": "not judged"}
META = {"hostnames": ["gpu01", "gpu01", "gpu02", "gpu02"],  # per rank; gpu03.. not run in pods
        "kubernetes_nodes": ["gke-a100-pool-x1", "gke-a100-pool-x1", "gke-a100-pool-x2", "gke-a100-pool-x2"]}


def _hosts(verdicts: dict) -> list[dict]:
    return [{"host": h, "verdict": v} for h, v in verdicts.items()]


def _applied(lines: list[str]) -> dict[str, dict]:
    """node -> {"label": value, "taint": (value, effect)} as kubectl applied each line."""
    found: dict[str, dict] = {}
    with api_server() as server:
        for line in lines:
            done = dry_run(line, server)
            assert done.returncode == 0, (line, done.stderr)
            node = json.loads(done.stdout)
            seen = found.setdefault(node["metadata"]["name"], {})
            if " label " in line:
                seen["label"] = node["metadata"]["labels"][HEALTH_LABEL]
            else:
                (taint,) = [t for t in node["spec"]["taints"] if t["key"] == HEALTH_LABEL]
                seen["taint"] = (taint["value"], taint["effect"])
    return found


def test_labels_for_all_taints_for_the_named_on_their_kubernetes_nodes(tmp_path):
    path = write_kubectl(tmp_path, {"hosts": _hosts(VERDICTS)}, META)
    assert path == tmp_path / KUBECTL_FILE and path.read_text().startswith("#!/bin/sh\n")
    lines = script_lines(path.read_text())
    assert lines[:3] == [f"kubectl label node gke-a100-pool-x1 {HEALTH_LABEL}=ok --overwrite",
                         f"kubectl label node gke-a100-pool-x2 {HEALTH_LABEL}=slow --overwrite",
                         f"kubectl taint node gke-a100-pool-x2 {HEALTH_LABEL}=slow:NoSchedule --overwrite"]
    assert sum(" label " in line for line in lines) == 6 and sum(" taint " in line for line in lines) == 4
    assert f"kubectl label node gpu06 {HEALTH_LABEL}=not-judged --overwrite" in lines  # labelled, not tainted
    assert not any("taint node gpu06" in line or "taint node gke-a100-pool-x1" in line for line in lines)


@pytest.mark.slow  # a dozen kubectl processes: over a second
@needs_kubectl
def test_kubectl_accepts_every_line_and_refuses_what_kubernetes_would():
    applied = _applied(kubectl_lines(_hosts(VERDICTS), META))
    assert applied == {"gke-a100-pool-x1": {"label": "ok"},
                       "gke-a100-pool-x2": {"label": "slow", "taint": ("slow", "NoSchedule")},
                       "gpu03": {"label": "bad", "taint": ("bad", "NoSchedule")},
                       "gpu04": {"label": "unreachable", "taint": ("unreachable", "NoSchedule")},
                       "gpu05": {"label": "dead", "taint": ("dead", "NoSchedule")},
                       "gpu06": {"label": "not-judged"}}
    with api_server() as server:  # the check can fail: a verdict as it is written in health.json
        refused = dry_run(f"kubectl label node gpu06 '{HEALTH_LABEL}=not judged' --overwrite", server)
        assert refused.returncode != 0 and "invalid label value" in refused.stderr
        refused = dry_run(f"kubectl taint node gpu02 {HEALTH_LABEL}=slow:NoSchedul", server)
        assert refused.returncode != 0 and "invalid taint effect" in refused.stderr


@pytest.mark.slow
@needs_kubectl
@needs_namespaces
def test_an_emulated_slow_host_is_tainted_alone(tmp_path):
    """The closing note's check: one host's link slowed on purpose; kubectl.sh labels all four
    and taints that one."""
    out = tmp_path / "emulated"
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "emulate", "--nodes", "4", "--ranks-per-node",
                           "1", "--inter-bandwidth", "200mbit", "--host-bandwidth", "node2=40mbit",
                           "--benchmarks", "health", "--sizes", "1M", "--timeout", "60", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 3, done.stderr[-3000:]
    assert f"kubectl: {out / KUBECTL_FILE}" in done.stdout
    verdict = json.loads((out / "health.json").read_text())["hosts"]
    applied = _applied(script_lines((out / KUBECTL_FILE).read_text()))
    assert {n: a["label"] for n, a in applied.items()} == {h["host"]: h["verdict"].replace(" ", "-") for h in verdict}
    assert set(applied) == {"node0", "node1", "node2", "node3"}
    assert [n for n, a in applied.items() if "taint" in a] == ["node2"], applied
