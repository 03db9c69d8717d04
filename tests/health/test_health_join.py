"""A host that hangs while it starts still gets a verdict: health forms its world from the ranks
that arrive within --timeout (measure/world.py `join_present`). Real processes: a local run
(torch's launcher, whose agent serves the store), ranks started as mpirun starts them (env://,
rank 0 serves the store) and the emulated cluster (root only: torchrun per host). The rank is
frozen by the test-only fault hook before it joins, so the freeze is always before the world
forms. Behaviour only: nothing here is timed tightly
(the deadlines below are far from what a loaded machine takes)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from console_lines import unwrapped
from fault_plugin import FAULT_ENV, Fault, fault_env
from namespaces import needs_namespaces

from allreduce_bench.core.measure.world import whole_hosts
from allreduce_bench.emulate import cluster as em
from allreduce_bench.health.pairing import launched_host_names

CLI = [sys.executable, "-m", "allreduce_bench"]
HEALTH = ["health", "--sizes", "64K", "--samples", "3", "--timeout", "6",
          "--no-plot"]


def verdicts(out) -> dict:
    doc = json.loads((out / "health.json").read_text())
    assert doc["complete"]
    return {h["host"]: h["verdict"] for h in doc["hosts"]}


def test_whole_hosts_and_names_of_hosts_that_never_came():
    assert whole_hosts({0, 1, 3}, 4, 1) == (0, 1, 3)
    assert whole_hosts({0, 1, 2, 4, 5}, 6, 2) == (0, 1, 4, 5)  # host 1 short of rank 3: sits out
    assert launched_host_names(["node0", "node1", None, "node3"], 1) == ["node0", "node1", "node2", "node3"]
    assert launched_host_names(["a", "a", None], 1) == ["node0", "node1", "node2"]  # one machine
    assert launched_host_names(["x", "y", None], 1, ["x", "y", "z"]) == ["x", "y", "z"]  # Slurm's list
    assert launched_host_names(["x", "y", None], 1) == ["x", "y", "host-of-rank2"]
    assert Fault.from_env({FAULT_ENV: "rank=2,action=stop,at=start"}).at == "start"
    with pytest.raises(ValueError, match="at must be row or start"):
        Fault.from_env({FAULT_ENV: "rank=2,action=delay,at=start"})


@pytest.mark.slow
def test_a_rank_0_frozen_at_start_up_in_a_local_run_is_unreachable_the_others_are_judged(tmp_path):
    # the store is the launcher agent's, so the others go on without rank 0: rank 1 leads
    out = tmp_path / "frozen-rank0"
    started = time.monotonic()
    done = subprocess.run([*CLI, *HEALTH, "--hosts", "3", "--ranks-per-node", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=240,
                          env=fault_env("rank=0,action=stop,at=start"))
    assert done.returncode == 3, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "health: node0 never joined" in done.stderr
    assert "rank(s) 0 stayed stopped (SIGSTOP)" in done.stderr  # the launcher is not left waiting
    found = verdicts(out)
    assert found.pop("node0") == "unreachable" and set(found) == {"node1", "node2"}
    assert json.loads((out / "health.json").read_text())["layout"]["never_joined"] == ["node0"]
    assert time.monotonic() - started < 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpirun_like(n: int, out, frozen: int, per_host: int = 1, timeout_s: float = 180) -> tuple[list, str]:
    """n ranks with Open MPI's variables on loopback (hosts of `per_host` ranks), rank `frozen`
    stopped as it starts; waits until every rank but the frozen one has ended (as mpirun
    would then end the job)."""
    port = _free_port()
    procs = []
    command = [*CLI, *HEALTH, "--out", str(out), "--ranks-per-node", str(per_host)]
    for rank in range(n):
        env = fault_env(f"rank={frozen},action=stop,at=start", {
            **os.environ, "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(n),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": str(n),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"})
        procs.append(subprocess.Popen(command, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for i, p in enumerate(procs) if i != frozen):
            assert time.monotonic() < deadline, "the ranks that came did not end"
            time.sleep(0.2)
        codes = [p.returncode for p in procs]
    finally:
        for p in procs:
            p.kill()
    return codes, unwrapped("".join(p.stdout.read() for p in procs))  # lines whole


@pytest.mark.slow
def test_under_an_env_launcher_a_host_short_of_a_rank_is_unreachable(tmp_path):
    # 3 hosts x 2 ranks, rank 1 frozen: node0 is left out whole; its rank 0, which serves the
    # store, sits out but stays until the world (ranks 2-5) has ended; rank 2 leads and writes
    codes, output = _mpirun_like(6, tmp_path / "mpi", frozen=1, per_host=2)
    assert codes[0] == 0 and codes[2] == 3 and codes[3:] == [0, 0, 0], output[-3000:]
    assert "Traceback" not in output and "health: node0 never joined" in output
    assert "rank 0: the world was formed without it" in output
    found = verdicts(tmp_path / "mpi")
    assert found.pop("node0") == "unreachable" and set(found) == {"node1", "node2"}


@pytest.mark.slow
def test_under_an_env_launcher_a_rank_0_frozen_at_start_up_is_one_line_per_rank(tmp_path):
    # rank 0 serves the store under srun/mpirun: nobody can meet without it
    codes, output = _mpirun_like(3, tmp_path / "mpi0", frozen=0)
    assert codes[1:] == [1, 1], output[-3000:]
    lines = [line for line in output.splitlines() if "could not join" in line]
    assert len(lines) == 2 and all("served by rank 0, did not answer in 6 s" in line for line in lines)
    assert "Traceback" not in output and "socket.cpp" not in output


def said(stderr: str) -> str:
    """The lines our code printed, without the launcher's tracebacks, which fill a tail."""
    return "\n".join(line for line in stderr.splitlines()
                     if line.startswith(("allreduce-bench", "emulate", "health")))[-3000:]


@pytest.mark.slow
@needs_namespaces
def test_emulated_host_frozen_at_start_up_is_unreachable_no_traceback_exit_3(tmp_path):
    out = tmp_path / "emulated"
    # 100 Mbit/s: the start-up link probe (8 MiB then) held the other ranks past --timeout 8
    driver = subprocess.Popen([*CLI, "emulate", "--nodes", "4", "--ranks-per-node", "1", "--inter-bandwidth",
                               "100mbit", "--benchmarks", "health", "--sizes", "1M", "--timeout", "8",
                               "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=fault_env("rank=2,action=stop,at=start"))
    try:
        _, stderr = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 3, said(stderr)
    assert "Traceback" not in stderr and "ChildFailedError" not in stderr
    assert "health: node2 never joined" in stderr
    found = verdicts(out)
    assert found.pop("node2") == "unreachable" and set(found.values()) == {"ok"}
    assert not [n for n in em.namespaces() if n.startswith(f"{em.PREFIX}{driver.pid}-")]


@pytest.mark.slow
def test_under_an_env_launcher_a_survivor_writes_the_verdict_when_rank_0_dies(tmp_path):
    # rank 0 coordinates and serves the store: the survivors lose both, and with no process of
    # ours outliving the ranks the first of them writes health.json from the journals
    # (before: each said it lost the coordinator, exit 1, all four `ok` in health.json)
    port, out = _free_port(), tmp_path / "survivor"
    procs = []
    for rank in range(3):
        env = {**os.environ, "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "3",
               "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
        procs.append(subprocess.Popen([*CLI, *HEALTH, "--out", str(out), "--ranks-per-node", "1",
                                       "--samples", "30"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        for line in procs[0].stdout:
            if "health: round 1" in line:
                break
        procs[0].kill()
        for p in procs[1:]:
            p.wait(timeout=120)
        output = "".join(p.stdout.read() for p in procs[1:])
    finally:
        for p in procs:
            p.kill()
    assert sorted(p.returncode for p in procs[1:]) == [1, 3], output[-3000:]
    assert "(written from what survived)" in output and "Traceback" not in output
    found = {h["host"]: h["verdict"] for h in json.loads((out / "health.json").read_text())["hosts"]}
    assert found == {"node0": "unreachable", "node1": "not judged", "node2": "not judged"}, output[-3000:]
