"""`allreduce-bench health` end to end: bad input (one line, exit 2), the dry-run plan, a world
of one host (real gloo ranks), and the emulated cluster with a slow host put in on purpose
(root only; skipped elsewhere). Behaviour only: nothing here is timed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import hostlist
import pandas as pd
import pytest
from namespaces import needs_namespaces

from allreduce_bench.core.host.processes import spawned_ranks
from allreduce_bench.emulate import cluster as em

CLI = [sys.executable, "-m", "allreduce_bench"]
# every test starts the command: real ranks, or a second or more to start and refuse
pytestmark = pytest.mark.slow


def _cli(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("args, says", [
    (["--expect", "inter=fast"], "--expect inter"),
    (["--expect", "nonsense"], "--expect"),
    (["--pairs", "some"], "--pairs 'some'"),
    (["--hosts", "0"], "--hosts must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    done = _cli("health", "--hosts", "2", "--ranks-per-node", "1", "--out", str(tmp_path / "o"), *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr


def test_baseline_of_another_layout_is_one_line(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "health.json").write_text(json.dumps({
        "schema_version": 1, "layout": {"ranks_per_node": 2, "sizes": [4096, 4194304]}, "thresholds": []}))
    done = _cli("health", "--hosts", "2", "--ranks-per-node", "1", "--baseline", str(base),
                "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--baseline" in done.stderr
    done = _cli("health", "--hosts", "2", "--baseline", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "no health.json" in done.stderr


def test_dry_run_prints_rounds_and_time_and_starts_nothing(tmp_path):
    done = _cli("health", "--dry-run", "--hosts", "8192", "--ranks-per-node", "8", "--pairs", "all",
                "--device", "cuda", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rounds 2-8192" in done.stdout and "4096 group(s) of  16 ranks" in done.stdout
    assert "estimated wall time" in done.stdout and not (tmp_path / "results").exists()
    done = _cli("health", "--dry-run", "--hosts", "7", "--ranks-per-node", "1", "--expect", "inter=0.1GB/s")
    assert done.returncode == 0 and "sat out" in done.stdout and "pair busbw 0.1 GB/s" in done.stdout


def test_one_host_runs_the_intra_check_only_and_says_so(tmp_path):
    out = tmp_path / "one"
    done = _cli("health", "--hosts", "1", "--ranks-per-node", "2", "--sizes", "4K,64K", "--samples", "3",
                "--timeout", "60", "--out", str(out), "--prometheus", str(tmp_path / "h.prom"))
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads((out / "health.json").read_text())
    assert [r["kind"] for r in doc["rounds"]] == ["intra"]
    assert "intra check only" in done.stdout and doc["complete"] and doc["exit_code"] == 0
    assert (out / "plots" / "health.png").exists() and (tmp_path / "h.prom").exists()
    assert "all hosts healthy" in done.stdout.splitlines()[-5:][0] or "nothing to exclude" in done.stdout


def test_two_hosts_of_two_ranks_measure_the_pair_then_its_rails_in_lockstep(tmp_path):
    out = tmp_path / "rails"
    done = _cli("health", "--hosts", "2", "--ranks-per-node", "2", "--sizes", "4K,64K", "--samples", "3",
                "--timeout", "60", "--out", str(out), "--no-plot")
    assert done.returncode in (0, 3), done.stderr[-2000:]  # two hosts: judged as a pair, not a fleet
    rows = pd.read_csv(out / "results.csv")
    pairs = rows[rows["health_check"].isin(["pair", "rail"])]
    assert sorted(pairs["health_check"].unique()) == ["pair", "rail"]
    rails = pairs[pairs["health_check"] == "rail"]
    assert sorted(rails["rail"].dropna().astype(int).unique()) == [0, 1]
    # lockstep: the rails of the pair took the same number of samples at each size
    assert (rails.groupby("size_bytes")["samples"].nunique() == 1).all()
    assert {r["rail"] for r in json.loads((out / "health.json").read_text())["rails"]} == {0, 1}


@needs_namespaces
def test_emulated_slow_host_is_found_and_exit_3(tmp_path):
    out = tmp_path / "emulated"
    done = _cli("emulate", "--nodes", "4", "--ranks-per-node", "1", "--inter-bandwidth", "200mbit",
                "--host-bandwidth", "node2=40mbit", "--host-cpu", "node1=25%",
                "--benchmarks", "health", "--sizes", "1M",
                "--timeout", "60", "--out", str(out), timeout=900)
    assert done.returncode == 3, done.stderr[-3000:]
    doc = json.loads((out / "health.json").read_text())
    verdicts = {h["host"]: h["verdict"] for h in doc["hosts"]}
    assert set(verdicts) == {"node0", "node1", "node2", "node3"}  # each host its own hostname
    assert verdicts["node2"] in ("slow", "bad") and "node2" in hostlist.expand_hostlist(doc["exclude"]), \
        done.stdout[-3000:] + done.stderr[-2000:]
    assert "--exclude=" in done.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["emulation"]["host_bandwidth"] == {"node2": "40Mbit"}
    # node1's quota is read inside its namespace (its timing alone may not show it)
    node1 = next(h for h in doc["hosts"] if h["host"] == "node1")
    assert node1["verdict"] == "slow" and node1["held_back"]["cpus_per_rank"] == 0.25
    assert "CPU quota of 0.25 CPU per rank" in node1["why"]
    assert all(h["held_back"]["cpus_per_rank"] is None for h in doc["hosts"] if h["host"] != "node1")


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL])
def test_a_frozen_or_dead_coordinator_is_named_by_the_driver_exit_3(tmp_path, fault):
    # before: exit 1 and every host `ok` ("no pair measured"), with torch's tracebacks when killed
    out = tmp_path / "coordinator"
    driver = subprocess.Popen([*CLI, "health", "--hosts", "3", "--ranks-per-node", "1", "--timeout", "8",
                               "--sizes", "1M", "--samples", "20", "--out", str(out), "--no-plot"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in driver.stdout:  # round 1 has begun: rank 0 is the coordinator, fault it
        seen.append(line)
        if "health: round 1" in line:
            break
    ranks = spawned_ranks(driver.pid)
    os.kill(ranks[0], fault)  # rank 0 starts first
    try:
        rest = driver.communicate(timeout=300)[0]
    finally:
        try:
            os.kill(ranks[0], signal.SIGKILL)  # the driver may have stopped it already
        except ProcessLookupError:
            pass
    assert driver.returncode == 3, "".join(seen) + rest
    assert "Traceback" not in rest and "(written from what survived)" in rest
    doc = json.loads((out / "health.json").read_text())
    verdicts = {h["host"]: h["verdict"] for h in doc["hosts"]}
    assert verdicts.pop("node0") == ("dead" if fault == signal.SIGKILL else "unreachable")
    assert set(verdicts.values()) == {"not judged"} and doc["exclude"] == "node0"


def test_a_frozen_partner_of_the_coordinator_is_unreachable_and_the_run_ends_exit_3(tmp_path):
    # two hosts: the frozen one is rank 0's partner, which holds rank 0's own measuring; the
    # coordinating goes on beside it, and the launcher is not left waiting on the frozen rank
    out = tmp_path / "frozen-partner"
    driver = subprocess.Popen([*CLI, "health", "--hosts", "2", "--ranks-per-node", "1", "--timeout", "8",
                               "--sizes", "1M", "--samples", "20", "--out", str(out), "--no-plot"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in driver.stdout:
        seen.append(line)
        if "health: round 1" in line:
            break
    ranks = spawned_ranks(driver.pid)
    os.kill(ranks[1], signal.SIGSTOP)
    try:
        rest = driver.communicate(timeout=240)[0]
    finally:
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert driver.returncode == 3, "".join(seen) + rest
    assert "rank(s) 1 stayed stopped (SIGSTOP) after every other rank had finished" in rest
    assert "not written" not in rest  # no row measured, and nothing said about a missing CSV
    doc = json.loads((out / "health.json").read_text())
    assert doc["complete"] and {h["host"]: h["verdict"] for h in doc["hosts"]}["node1"] == "unreachable"
    assert doc["exclude"] == "node1"


@needs_namespaces
def test_emulated_frozen_host_is_unreachable_the_others_get_verdicts_exit_3(tmp_path):
    out = tmp_path / "frozen-host"
    driver = subprocess.Popen([*CLI, "emulate", "--nodes", "4", "--ranks-per-node", "1", "--inter-bandwidth",
                               "200mbit", "--benchmarks", "health", "--sizes", "1M", "--timeout", "15",
                               "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in driver.stdout:
        if "health: round 1" in line:
            break
    host = next(n for n in em.namespaces() if n.startswith(f"{em.PREFIX}{driver.pid}-") and n.endswith("-h2"))
    ranks = []
    for pid in subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split():
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"allreduce_bench" in command and b"torch.distributed.run" not in command:
            ranks.append(int(pid))  # node2's worker, not its torchrun agent
    os.kill(ranks[0], signal.SIGSTOP)
    driver.communicate(timeout=600)
    assert driver.returncode == 3
    doc = json.loads((out / "health.json").read_text())
    verdicts = {h["host"]: h["verdict"] for h in doc["hosts"]}
    assert verdicts.pop("node2") == "unreachable" and set(verdicts.values()) == {"ok"}
