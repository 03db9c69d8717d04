"""A representative part of the fault matrix (doc/health.md; the whole of it:
`scripts/perf_health.py --kinds matrix`) on the emulated 4 x 1 cluster (root only): each kind
of fault once, each role once, each phase but start-up once (start-up faults:
test_health_join.py), and the link cuts while the verdict is written. A case passes when the
faulted host is named dead or unreachable, nobody else is, the command exits 3 with health.json
written within --timeout + 15 s (plus room for a loaded machine), and its console shows no
traceback."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from namespaces import needs_namespaces

pytestmark = [pytest.mark.slow, needs_namespaces]
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "perf_health.py"
TIMEOUT_S = 20.0
LOADED_S = 20.0  # beyond the target: other suites share the machine's cores


def _perf():
    spec = importlib.util.spec_from_file_location("perf_health", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("kind", "role", "phase"), [
    ("kill", "rank0", "round1"),  # before: all four `ok`, exit 1, torchrun's tracebacks
    ("stop", "rank0", "later"),  # before: all four `ok`, exit 1 after 35 s
    ("cut", "middle", "round1"),
    ("kill", "last", "writing"),
    ("cut", "middle", "writing"),  # before: all four `ok`, exit 0 (nothing used the link again)
    ("cut", "rank0", "writing"),  # before: the same
])
def test_the_faulted_host_is_named_and_nobody_else(tmp_path, kind, role, phase):
    trial = _perf().matrix_trial("4x1", tmp_path / "case", "400mbit", TIMEOUT_S, kind, role, phase)
    log = (tmp_path / "case.log").read_text()
    if not trial["landed"]:
        pytest.skip(f"the fault found no rank of node{trial['host']} left (its part had ended): {log[-500:]}")
    assert trial["hit"] and trial["false"] == 0 and trial["code"] == 3, log[-4000:]
    assert trial["written"] and not trial["traceback"], log[-4000:]
    assert trial["seconds"] <= TIMEOUT_S + 15 + LOADED_S, log[-4000:]
