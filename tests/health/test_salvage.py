"""No verdict without evidence, and the verdict written by whoever is alive: a host never measured
is `not judged`; when hosts died, froze or were cut off, the launching process writes
health.json from the ranks' journals, the coordinator's last document and how each launch
ended (health/salvage.py). Fast: journals and launches made up here. The faults on real
processes: tests/health/test_health.py (local) and test_fault_matrix.py (emulated)."""
from __future__ import annotations

import io
import json
from types import SimpleNamespace

from allreduce_bench.emulate.processes import FirstFailure, LauncherOutput
from allreduce_bench.health.journal import Journal, read_journals
from allreduce_bench.health.outputs import document, summary
from allreduce_bench.health.reference import Reference
from allreduce_bench.health.rounds import HealthCheck
from allreduce_bench.health.salvage import STOPPED, Watch, conclude

HOSTS = [f"node{i}" for i in range(4)]


def _journals(out, rounds: dict[str, int], last: dict[str, str]):
    """One rank per host: joined, its rounds, then `last[host]` (end, lost or nothing)."""
    for rank, host in enumerate(HOSTS):
        journal = Journal(out, rank, host=host, world_rank=rank, coordinator="node0")
        for k in range(1, rounds.get(host, 0) + 1):
            journal.note("round", k=k, where=f"health round {k} (pair {host}+x)")
        if last.get(host) in ("end", "ending"):
            journal.note(last[host])
        elif last.get(host) == "lost":
            journal.note("lost", host="node0", why="the coordinator stopped answering")
    return read_journals(out)


def _verdicts(out) -> dict:
    return {h["host"]: h["verdict"] for h in json.loads((out / "health.json").read_text())["hosts"]}


def test_a_host_never_measured_is_not_judged_not_ok_and_is_listed_apart():
    # before: `ok`, "no pair measured: no partner was available", and an exit code of 0
    check = HealthCheck(HOSTS, 1, Reference([4096, 4 << 20]))
    doc = document(check, {"hosts": 4, "sizes": [4096, 4 << 20]}, complete=False, note="in progress")
    assert {h["verdict"] for h in doc["hosts"]} == {"not judged"}
    assert doc["exclude"] == "" and doc["not_judged"] == "node[0-3]" and doc["exit_code"] == 1
    said = summary(doc)
    assert "0 ok, 4 not judged" in said and "not judged (check them again): node[0-3]" in said
    assert "all hosts healthy" not in said


def test_a_dead_host_is_named_and_excluded_and_the_others_not_judged(tmp_path):
    # node0, the coordinator's and the store's host, died in round 1: no round was written
    journals = _journals(tmp_path, {h: 1 for h in HOSTS}, {"node1": "lost", "node2": "lost", "node3": "lost"})
    prom = tmp_path / "health.prom"
    code = conclude(tmp_path, {"node0": "SIGKILL", "node1": "lost", "node2": "lost", "node3": "lost"},
                    journals, prometheus=str(prom))
    assert code == 3
    doc = json.loads((tmp_path / "health.json").read_text())
    assert _verdicts(tmp_path) == {"node0": "dead", "node1": "not judged", "node2": "not judged",
                                   "node3": "not judged"}
    assert doc["exclude"] == "node0" and doc["not_judged"] == "node[1-3]" and doc["finished"]
    assert "SIGKILL" in doc["hosts"][0]["why"] and "health round 1" in doc["hosts"][0]["why"]
    assert 'allreduce_bench_health_verdict{host="node0",verdict="dead"} 1.0' in prom.read_text()
    assert "allreduce_bench_health_unhealthy_hosts 1.0" in prom.read_text()


def test_a_frozen_coordinator_is_unreachable_when_the_others_say_they_lost_it(tmp_path):
    journals = _journals(tmp_path, {h: 1 for h in HOSTS}, {"node1": "lost", "node2": "lost", "node3": "lost"})
    assert conclude(tmp_path, {"node0": "running", "node1": "lost", "node2": "lost", "node3": "lost"},
                    journals) == 3
    assert _verdicts(tmp_path)["node0"] == "unreachable"
    assert set(_verdicts(tmp_path).values()) == {"unreachable", "not judged"}


def test_a_coordinator_that_wakes_and_says_it_lost_the_store_is_still_named(tmp_path):
    """CI, a local run: rank 0 SIGSTOPped in round 1, then stopped by the launcher after it woke
    and found the store silent. Every host then says it lost someone, so no side stayed: the
    host all the others lost is the one named (before: every host `not judged`, exit 1)."""
    journals = _journals(tmp_path, {h: 1 for h in HOSTS}, {h: "lost" for h in HOSTS[1:]})
    Journal(tmp_path, 0, host="node0", world_rank=0, coordinator="node0").note(
        "lost", host="node0", why="the launcher's store did not answer")
    journals = read_journals(tmp_path)
    assert conclude(tmp_path, {h: "lost" for h in HOSTS}, journals) == 3
    assert _verdicts(tmp_path) == {"node0": "unreachable", "node1": "not judged", "node2": "not judged",
                                   "node3": "not judged"}


def test_a_cut_off_coordinator_is_named_by_the_majority_not_believed(tmp_path):
    # node0's link was cut: its coordinator named the other three unreachable and ended;
    # the three said they lost it. The side cut off is the smaller one.
    check = HealthCheck(HOSTS, 1, Reference([4096]))
    check.unreachable.update({"node1": 1, "node2": 1, "node3": 1})
    (tmp_path / "health.json").write_text(json.dumps(
        {"schema_version": 1, **document(check, {"sizes": [4096]}), "finished": "then"}))
    journals = _journals(tmp_path, {h: 1 for h in HOSTS},
                         {"node0": "end", "node1": "lost", "node2": "lost", "node3": "lost"})
    assert conclude(tmp_path, {"node0": "ended", "node1": "lost", "node2": "lost", "node3": "lost"},
                    journals) == 3
    assert _verdicts(tmp_path) == {"node0": "unreachable", "node1": "not judged", "node2": "not judged",
                                   "node3": "not judged"}
    assert not json.loads((tmp_path / "health.json").read_text())["complete"]


def test_a_cut_off_host_is_named_when_the_coordinator_side_is_larger(tmp_path):
    journals = _journals(tmp_path, {h: 2 for h in HOSTS},
                         {"node0": "end", "node1": "end", "node2": "lost", "node3": "end"})
    conclude(tmp_path, {"node0": "ended", "node1": "ended", "node2": "lost", "node3": "ended"}, journals)
    found = _verdicts(tmp_path)
    assert found["node2"] == "unreachable" and "node0" not in json.loads(
        (tmp_path / "health.json").read_text())["exclude"]


def test_hosts_waiting_to_confirm_the_end_are_not_named_with_a_frozen_writer(tmp_path):
    # rank 0 froze once the check was complete (while it wrote the figure); the others had
    # measured their part and waited for its request to confirm (health/ending.py). Before:
    # emulate named all four unreachable
    from health_sim import SimCluster, names

    check, _ = SimCluster(names(4), noise=0.02).run()
    (tmp_path / "health.json").write_text(json.dumps({"schema_version": 1, **document(check, {"sizes": [4096]})}))
    _journals(tmp_path, {h: 2 for h in HOSTS}, {"node1": "ending", "node2": "ending", "node3": "ending"})
    config = SimpleNamespace(launch=SimpleNamespace(timeout_s=20.0), settings=SimpleNamespace(prometheus=None))
    assert Watch(tmp_path, 0.0, config).result([None] * 4, [None] * 4) == 3
    assert _verdicts(tmp_path) == {"node0": "unreachable", "node1": "ok", "node2": "ok", "node3": "ok"}
    assert "health round 2" in json.loads((tmp_path / "health.json").read_text())["hosts"][0]["why"]


def test_ranks_the_local_launcher_stopped_are_named_only_when_the_others_lost_them(tmp_path):
    # a local world: rank 0 froze, ranks 1 and 2 gave up on it, torch's launcher stopped 0 and 3
    journals = _journals(tmp_path, {h: 1 for h in HOSTS}, {"node1": "lost", "node2": "lost"})
    conclude(tmp_path, {"node0": STOPPED, "node1": "lost", "node2": "lost", "node3": STOPPED}, journals)
    assert _verdicts(tmp_path) == {"node0": "unreachable", "node1": "not judged", "node2": "not judged",
                                   "node3": "not judged"}


def test_launcher_output_keeps_our_lines_and_logs_the_tracebacks():
    log, console = io.StringIO(), io.StringIO()
    out = LauncherOutput("node1", log, console)
    out.pump(io.StringIO(
        "health: round 1: pairs\n"
        "E1206 07:17:08.176000 14846 site-packages/torch/.../api.py:1002] failed (exitcode: -9) "
        "local_rank: 0 (pid: 14918) of binary: python\n"
        "Traceback (most recent call last):\n  File \"x\", line 1, in <module>\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "======\nallreduce_bench FAILED\n------\nFailures:\n  <NO_OTHER_FAILURES>\n======\n"
        "allreduce-bench health: rank 1: lost the coordinator\n"))
    assert console.getvalue() == "health: round 1: pairs\nallreduce-bench health: rank 1: lost the coordinator\n"
    assert "node1: Traceback (most recent call last):" in log.getvalue() and out.worker_exit == -9


def test_a_benchmark_without_a_verdict_of_its_own_says_which_host_stopped_it():
    # emulate's default watch: the first host whose rank died by a signal is the cause

    watch = FirstFailure()
    assert not watch.done([None, None, None], [None, None, None])
    codes, exits = [1, None, 1], [1, None, -9]
    assert watch.done(codes, exits) and watch.result(codes, exits) == 1
    assert watch.stopped["host"] == "node2" and watch.stopped["how"] == "its rank was killed by SIGKILL"
