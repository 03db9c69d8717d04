"""The launchers users use, across the hosts of the emulated cluster: srun -N 4, sbatch -N 4
(with torchrun --nnodes 4 and a c10d rendezvous on node0), Open MPI's mpirun and MPICH's
mpiexec through the rsh agent, on 4 emulated hosts x 1 rank whose links are shaped by tc.

One Slurm-emulated cluster (emulate/slurm.py) serves the whole module; after it no namespace,
daemon or rank of it may be left, also after a failure. Each test checks rows (wrong == 0),
hostnames node0..node3 in meta.json, the layout taken from them (4 nodes x 1 rank) and results
written once (rank 0 only). Root and slurm-wlm are needed; elsewhere skipped with the reason.
Sizes are tiny: behaviour, not speed (scripts/perf_launchers.py measures).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fault_plugin import fault_env
from launcher_services import mpich, open_mpi

from allreduce_bench.core.errors import UsageError
from allreduce_bench.emulate import cluster as em
from allreduce_bench.emulate.slurm import slurm_cluster, slurm_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.launchers, pytest.mark.slow, pytest.mark.timeout(240)]
BENCH = [sys.executable, "-m", "allreduce_bench"]
HOSTS = ["node0", "node1", "node2", "node3"]
RATE_BPS = 200e6  # every host's uplink
SLOW_BPS = 10e6  # the host slowed on purpose for the health loop
TINY = ["--sizes", "4K", "--samples", "3", "--no-plot"]


def _why_not() -> str:
    try:
        em.check_can_emulate()
    except UsageError as error:
        return str(error)
    return slurm_missing()


@pytest.fixture(scope="module")
def slurm():
    reason = _why_not()
    if reason:
        pytest.skip(f"no Slurm-emulated cluster here: {reason}")
    context = slurm_cluster(len(HOSTS), RATE_BPS)
    cluster = context.__enter__()
    try:
        yield cluster
    finally:
        context.__exit__(None, None, None)
        left = [n for n in cluster.cluster.hosts + [cluster.cluster.switch] if n in em.namespaces()]
        daemons = subprocess.run(["pgrep", "-f", str(cluster.root)], capture_output=True,
                                 text=True).stdout.split()
        uplink = subprocess.run(["ip", "link", "show", cluster.uplink], capture_output=True)
        assert not left and not daemons and uplink.returncode != 0 and not cluster.root.exists(), \
            f"left behind: namespaces {left}, daemons {daemons}, uplink {uplink.returncode == 0}"


def rank_env(slurm, **extra) -> dict:
    env = {k: v for k, v in slurm.env.items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GLOO_SOCKET_IFNAME")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TORCH_CPP_LOG_LEVEL="ERROR", **extra)
    return env


def launch(command: list[str], env: dict, timeout: float = 150) -> tuple[int, str]:
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                              start_new_session=True, cwd=ROOT)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"{command[0]} did not end within {timeout} s: a hang\n"
                             f"{error.stdout}{error.stderr}") from None
    return done.returncode, done.stdout + done.stderr


def across_hosts(out: Path, launcher: str, hosts=HOSTS, rows: int | None = None,
                 benchmark: str = "allreduce") -> pd.DataFrame:
    """Checked rows of one world spanning `hosts`, one rank each, written once."""
    meta = json.loads((out / "meta.json").read_text())
    assert meta["hostnames"] == hosts and meta["nodes_seen"] == len(hosts), meta["hostnames"]
    assert meta["launcher"] == launcher
    frame = pd.read_csv(out / "results.csv")
    assert (frame["wrong"] == 0).all() and set(frame["benchmark"]) == {benchmark}
    assert set(frame["nodes"]) == {len(hosts)} and set(frame["ranks_per_node"]) == {1}
    key = [c for c in ("collective", "algorithm", "world_size", "size_bytes", "link", "operation")
           if frame[c].notna().any()]
    assert not frame.duplicated(key).any(), "a row written twice: more than one writer"
    assert (out / "results.csv").read_text().count("run_id,") == 1
    if rows is not None:
        assert len(frame) == rows
    return frame


def wait_job(env: dict, job: str, timeout: float = 150) -> str:
    """A batch job's final state (polling: `sbatch --wait` backs off to checks seconds apart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], env=env,
                               capture_output=True, text=True, timeout=20).stdout
        state = re.search(r"JobState=(\w+)", shown).group(1) if "JobState=" in shown else ""
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.3)
    subprocess.run(["scancel", job], env=env, timeout=20)
    raise AssertionError(f"batch job {job} did not end within {timeout} s: a hang")


def sbatch(slurm, tmp_path: Path, options: list[str], run_options: list[str], **extra) -> str:
    env = rank_env(slurm, OUT_ROOT=str(tmp_path / "job"), PYTHON=sys.executable, **extra)
    log = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--parsable", *options, f"--output={log}", f"--chdir={ROOT}",
                           str(ROOT / "scripts" / "slurm_allreduce.sbatch"), *run_options],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    state = wait_job(env, done.stdout.strip().split(";")[0])
    output = log.read_text() if log.exists() else ""
    assert state == "COMPLETED", f"{state}\n{output}"
    return output


def test_emulate_slurm_holds_a_cluster_until_sigterm(tmp_path):
    """The command users start (runs first, before the module's cluster: one at a time)."""
    reason = _why_not()
    if reason:
        pytest.skip(f"no Slurm-emulated cluster here: {reason}")
    log = tmp_path / "emulate.log"
    with log.open("w") as sink:
        driver = subprocess.Popen([*BENCH, "emulate", "--slurm", "--nodes", "3", "--inter-bandwidth",
                                   "200mbit"], stdout=sink, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "Ctrl-C stops it" not in log.read_text() and time.monotonic() < deadline:
            assert driver.poll() is None, log.read_text()
            time.sleep(0.2)
        conf = re.search(r"^export SLURM_CONF=(\S+)$", log.read_text(), re.M).group(1)
        env = {**os.environ, "SLURM_CONF": conf}
        done = subprocess.run(["srun", "-N", "3", "hostname"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and sorted(done.stdout.split()) == HOSTS[:3], done.stderr
    finally:
        driver.terminate()
        rc = driver.wait(timeout=60)
    assert rc == 0 and "every namespace and daemon removed" in log.read_text()
    assert not Path(conf).parent.exists()
    assert not subprocess.run(["pgrep", "-f", str(Path(conf).parent)], capture_output=True).stdout


def test_srun_run_spans_the_four_hosts(slurm, tmp_path):
    out = tmp_path / "run"
    rc, output = launch(["srun", "-N", "4", "--kill-on-bad-exit=1", *BENCH, "run",
                         "--algos", "native,ring,hierarchical", *TINY, "--nccl-debug",
                         "--out", str(out)], rank_env(slurm))
    assert rc == 0, output
    frame = across_hosts(out, "slurm", rows=3)
    assert set(frame["algorithm"]) == {"native", "ring", "hierarchical"}
    assert output.count("results: ") == 1  # rank 0 alone reports and writes
    assert "NCCL wrote no debug lines" in output  # gloo: --nccl-debug says so, once


def test_per_host_debug_files_reach_rank_0(slurm, tmp_path):
    """What `--nccl-debug` does with NCCL's %h.%p files, each written on its own host."""
    out = tmp_path / "debug"
    rc, output = launch(["srun", "-N", "4", sys.executable, str(Path(__file__).parent / "emulated_ranks.py"),
                         str(out)], rank_env(slurm))
    assert rc == 0, output
    files = sorted(p.name.split(".")[0] for p in (out / "nccl-debug").glob("*.log"))
    assert files == HOSTS
    block = json.loads((out / "meta.json").read_text())["nccl"]
    assert sorted(block["hosts"]) == HOSTS and block["world_size"] == 4


def test_srun_links_on_two_hosts_of_two_ranks(slurm, tmp_path):
    out = tmp_path / "links"
    rc, output = launch(["srun", "-N", "2", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
                         *BENCH, "links", "--sizes", "4K", "--iters", "1", "--warmup", "0",
                         "--no-plot", "--out", str(out)], rank_env(slurm))
    assert rc == 0, output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["hostnames"] == ["node0", "node0", "node1", "node1"]
    frame = pd.read_csv(out / "results.csv")
    assert (frame["wrong"] == 0).all() and set(frame["link"]) >= {"intra", "inter"}
    assert set(frame["nodes"]) == {2} and set(frame["ranks_per_node"]) == {2}


def test_the_health_loop_finds_the_slow_host_and_the_exclude_runs_clean(slurm, tmp_path):
    """srun -N 4 health with node2's link slowed; its --exclude= fed to sbatch -N 3."""
    slurm.set_rate("node2", SLOW_BPS)
    try:
        rc, output = launch(["srun", "-N", "4", *BENCH, "health", "--sizes", "4K,256K",
                             "--budget", "0.05", "--no-plot", "--timeout", "30", "--out",
                             str(tmp_path / "health")], rank_env(slurm))
    finally:
        slurm.set_rate("node2", RATE_BPS)
    assert rc == 3, output
    doc = json.loads((tmp_path / "health" / "health.json").read_text())
    assert {h["host"]: h["verdict"] for h in doc["hosts"]} == {
        "node0": "ok", "node1": "ok", "node2": "bad", "node3": "ok"}, output
    exclude = re.findall(r"^(--exclude=\S+)$", output, re.M)
    assert exclude == ["--exclude=node2"], output
    sbatch(slurm, tmp_path, ["-N", "3", *exclude], ["--algos", "native,hierarchical", *TINY])
    across_hosts(tmp_path / "job" / "cpu", "slurm", hosts=["node0", "node1", "node3"], rows=2)


def test_sbatch_with_torchrun_and_a_rendezvous_on_node0(slurm, tmp_path):
    """sbatch -N 4 of the repository's script, LAUNCH=torchrun: srun starts one torchrun
    --nnodes 4 per host, which meet at a c10d rendezvous on node0 (the first host)."""
    output = sbatch(slurm, tmp_path, ["-N", "4"], ["--algos", "native,hierarchical", *TINY],
                    LAUNCH="torchrun")
    assert "4 node(s) x 1 rank(s) on CPUs via torchrun" in output, output
    frame = across_hosts(tmp_path / "job" / "cpu", "torchrun", rows=2)
    assert set(frame["tag"]) == {"cpu"}


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_mpi_across_namespaces_through_the_agent(slurm, mpi, tmp_path):
    path, reason = open_mpi() if mpi == "openmpi" else mpich()
    if not path:
        pytest.skip(reason)
    env = rank_env(slurm, **slurm.mpi_env())
    if mpi == "openmpi":
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        passed = [a for name in ("PYTHONPATH", "MASTER_ADDR", "OMP_NUM_THREADS",
                                 "TORCH_CPP_LOG_LEVEL", "PYTHONUNBUFFERED") for a in ("-x", name)]
        prefix = [path, *slurm.openmpi_options(), "-H", ",".join(HOSTS), "-np", "4", *passed]
    else:
        prefix = [path, *slurm.mpich_options(), "-hosts", ",".join(HOSTS), "-n", "4"]
    out = tmp_path / mpi
    rc, output = launch([*prefix, *BENCH, "run", "--algos", "native,hierarchical", *TINY,
                         "--out", str(out)], env)
    assert rc == 0, output
    across_hosts(out, mpi, rows=2)


def test_srun_health_with_a_host_frozen_at_start_up(slurm, tmp_path):
    """node2's rank stopped while it starts (before the world forms): the three others are
    judged among themselves and node2 is unreachable; --kill-on-bad-exit ends the step (the
    frozen task never exits), so the check's own exit code is read from health.json."""
    out = tmp_path / "frozen"
    started = time.monotonic()
    rc, output = launch(["srun", "-N", "4", "--kill-on-bad-exit=1", *BENCH, "health",
                         "--sizes", "4K,256K", "--budget", "0.05", "--no-plot", "--timeout",
                         "10", "--out", str(out)],
                        fault_env("rank=2,action=stop,at=start", rank_env(slurm)),
                        timeout=120)
    doc = json.loads((out / "health.json").read_text())
    assert {h["host"]: h["verdict"] for h in doc["hosts"]} == {
        "node0": "ok", "node1": "ok", "node2": "unreachable", "node3": "ok"}, output
    assert doc["exit_code"] == 3 and rc != 0 and "Traceback" not in output, output
    assert time.monotonic() - started < 10 + 60, output  # a hang check, not a speed target


def test_a_host_whose_slurmd_is_down(slurm, tmp_path):
    """Slurm's own answer (runs last: node3 stays out): before slurmctld notices, srun -N 4
    gets node3 and its launch fails at once, naming node3, before any rank could write.
    (The job then stays COMPLETING on the other hosts for ~45 s, and after SlurmdTimeout the
    node is down*: doc/cluster.md; `sbatch --exclude` is tested with the health loop.)"""
    slurm.stop_slurmd("node3")
    out = tmp_path / "dead"
    started = time.monotonic()
    rc, output = launch(["srun", "-N", "4", "--kill-on-bad-exit=1", *BENCH, "health",
                         "--sizes", "4K", "--budget", "0.05", "--no-plot", "--timeout", "10",
                         "--out", str(out)], rank_env(slurm), timeout=90)
    assert rc != 0 and "failed on node node3" in output, output
    assert time.monotonic() - started < 60, output
    assert not (out / "health.json").exists() and not (out / "results.csv").exists()
