"""The commands under real launchers: Open MPI's mpirun, MPICH's mpiexec, and srun and sbatch on
a private one-node Slurm started for these tests (see launcher_services.py).

Each launcher must give checked rows for world sizes 2 and 4; `links` and `ddp` must join its
world; a rank killed (rank 0, the store's host, or another) or frozen (SIGSTOP) must end the run
within --timeout plus a few seconds, be named, and leave the finished rows. Ranks fail on
purpose through the tests' fault plugin (tests/support/fault_plugin.py), between two measurements.

Marked `launchers` (deselect with `-m "not launchers"`); skipped, with the reason, where a
launcher is not installed (.ci/run installs them all).
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
from console_lines import unwrapped
from fault_plugin import FAULT_ENV, fault_env
from launcher_services import LocalSlurm, mpich, open_mpi, slurm_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.launchers, pytest.mark.slow, pytest.mark.timeout(240)]
BENCH = [sys.executable, "-m", "allreduce_bench"]
SMALL = ["--algos", "native,ring", "--sizes", "4K,8K", "--iters", "1", "--warmup", "0",
         "--no-plot"]  # for the fault tests: 4 rows at world size 2, the fault after 2
ENDS_WITHIN_S = 30  # a hang check on a loaded machine, not a speed target (see fault_times.py)


def rank_environment(base: dict | None = None, fault: str | None = None) -> dict:
    """The test's environment for the ranks: our code, one thread per rank, loopback, no
    launcher variables of an outer job, and the fault if any."""
    env = {k: v for k, v in (base or os.environ).items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE", "MASTER_", "TORCHELASTIC_"))
           and k != FAULT_ENV}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               PYTHONUNBUFFERED="1")
    return fault_env(fault, env) if fault else env


@pytest.fixture(scope="module")
def openmpi_launch():
    path, reason = open_mpi()
    if not path:
        pytest.skip(reason)

    def command(n: int, fault: str | None = None) -> tuple[list[str], dict]:
        env = rank_environment(fault=fault)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        passed = [arg for name in ("PYTHONPATH", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME",
                                   "PYTHONUNBUFFERED", *([FAULT_ENV, "ALLREDUCE_BENCH_PLUGINS"] if fault else []))
                  for arg in ("-x", name)]
        return [path, "--oversubscribe", "-np", str(n), *passed], env
    return command


@pytest.fixture(scope="module")
def mpich_launch():
    path, reason = mpich()
    if not path:
        pytest.skip(reason)

    def command(n: int, fault: str | None = None) -> tuple[list[str], dict]:
        return [path, "-n", str(n)], rank_environment(fault=fault)  # hydra passes the env
    return command


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def srun_launch(slurm):
    def command(n: int, fault: str | None = None, kill_on_bad_exit: bool = False):
        # Without --kill-on-bad-exit the survivors of a killed rank exit by themselves after
        # their line; with it (a frozen rank never exits) srun stops the step at the first exit.
        return (["srun", "-n", str(n), *(["--kill-on-bad-exit=1"] if kill_on_bad_exit else [])],
                rank_environment(slurm.env, fault))
    return command


def launch(prefix_env, args: list[str], timeout: float = 180) -> tuple[int, str, float]:
    """Run `prefix + allreduce-bench args`; its exit code, output (lines whole) and the time it ended."""
    prefix, env = prefix_env
    try:
        done = subprocess.run([*prefix, *BENCH, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"{' '.join(prefix)} did not end within {timeout} s: a hang\n"
                             f"{error.stdout}{error.stderr}") from None
    return done.returncode, unwrapped(done.stdout + done.stderr), time.time()


def checked_rows(out: Path, world_sizes: set[int], benchmark: str = "allreduce") -> pd.DataFrame:
    rows = pd.read_csv(out / "results.csv")
    assert set(rows["world_size"]) == world_sizes
    assert set(rows["benchmark"]) == {benchmark}
    assert (rows["wrong"] == 0).all()
    return rows


def fault_time(output: str) -> float:
    return float(re.search(r"test fault: .* at t=([\d.]+)", output).group(1))


LAUNCHERS = ["openmpi_launch", "srun_launch", "mpich_launch"]
MEMBERS = {"openmpi_launch": "openmpi", "srun_launch": "slurm", "mpich_launch": "mpich"}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_run_gives_checked_rows_for_world_sizes_2_and_4(launcher, request, tmp_path):
    rc, output, _ = launch(request.getfixturevalue(launcher)(4),
                           ["run", "--quick", "--world-sizes", "2,4", "--no-plot", "--out",
                            str(tmp_path)])
    assert rc == 0, output
    rows = checked_rows(tmp_path, {2, 4})
    assert set(rows["algorithm"]) == {"native", "ring", "naive", "hierarchical"}
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["launcher"] == MEMBERS[launcher] and len(meta["hostnames"]) == 4


@pytest.mark.parametrize("launcher", ["openmpi_launch", "srun_launch"])
@pytest.mark.parametrize("command,kind", [
    (["links", "--ranks-per-node", "1", "--sizes", "4K", "--iters", "1", "--warmup", "0"],
     "links"),
    (["ddp", "--world-sizes", "2", "--params", "100K", "--layers", "2", "--batch-size", "2",
      "--bucket-mb", "1", "--accum", "2", "--iters", "1", "--warmup", "0"], "ddp"),
])
def test_links_and_ddp_under_the_launcher(launcher, command, kind, request, tmp_path):
    rc, output, _ = launch(request.getfixturevalue(launcher)(2),
                           [*command, "--no-plot", "--out", str(tmp_path)])
    assert rc == 0, output
    checked_rows(tmp_path, {2}, kind)


# Not under MPICH: its Hydra ends the whole job (and stops relaying output) the moment a rank
# dies, even with -disable-auto-cleanup, so no survivor gets to speak; Hydra names the pid.
@pytest.mark.parametrize("launcher", ["openmpi_launch", "srun_launch"])
@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_rank_is_named_and_rows_are_kept(launcher, victim, request, tmp_path):
    rc, output, ended = launch(
        request.getfixturevalue(launcher)(2, fault=f"rank={victim},after_rows=2,action=kill"),
        ["run", "--world-sizes", "2", *SMALL, "--timeout", "20", "--out", str(tmp_path)])
    assert rc != 0, output
    assert ended - fault_time(output) < ENDS_WITHIN_S, output
    named = ("missing rank 0 (the store's host) is gone" if victim == 0 else "missing rank 1")
    assert re.search(rf"rank {1 - victim}: stopped at ring, world size 2, 4096 B: a peer's "
                     rf"connection closed; {re.escape(named)}", output), output
    assert "missing rank unknown" not in output
    rows = checked_rows(tmp_path, {2})
    assert len(rows) == 2  # the two finished before the fault, whole
    assert (tmp_path / "results.csv").read_bytes().endswith(b"\n")


@pytest.fixture
def local_launch():
    """No launcher: the suite's own local world (torch's elastic agent holds the store)."""
    return lambda n, fault=None: ([], rank_environment(fault=fault))


@pytest.mark.parametrize("launcher,victim", [("local_launch", 1), ("openmpi_launch", 1),
                                             ("srun_launch", 1), ("srun_launch", 0)])
def test_a_frozen_rank_ends_the_run_within_the_timeout_and_is_named(launcher, victim, request,
                                                                     tmp_path):
    factory = request.getfixturevalue(launcher)
    fault = f"rank={victim},after_rows=2,action=stop"
    prefix_env = factory(2, fault=fault, kill_on_bad_exit=True) if launcher == "srun_launch" \
        else factory(2, fault=fault)
    rc, output, ended = launch(prefix_env, ["run", "--world-sizes", "2", *SMALL, "--timeout", "5",
                                            "--out", str(tmp_path)])
    assert rc != 0, output
    assert ended - fault_time(output) < 5 + ENDS_WITHIN_S, output
    named = ("missing rank 0 (the store's host) does not answer" if victim == 0
             else "missing rank 1 (frozen)")
    assert re.search(rf"rank {1 - victim}: stopped at ring, world size 2, 4096 B: no answer "
                     rf"within --timeout 5 s; {re.escape(named)}", output), output
    assert len(checked_rows(tmp_path, {2})) == 2


SBATCH_SCRIPT = ROOT / "scripts" / "slurm_allreduce.sbatch"


def sbatch(slurm: LocalSlurm, tmp_path: Path, *run_options: str, fault: str | None = None
           ) -> tuple[int, str]:
    """Submit the repository's batch script unchanged to the CPU partition and wait for it
    (polling: `sbatch --wait` backs off to checks many seconds apart)."""
    env = rank_environment(slurm.env, fault)
    env.update(OUT_ROOT=str(tmp_path / "job"), PYTHON=sys.executable)
    log = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks=4", f"--output={log}",
                           f"--chdir={ROOT}", str(SBATCH_SCRIPT), *run_options],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 200
    state = ""
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], env=env,
                               capture_output=True, text=True, timeout=20).stdout
        state = re.search(r"JobState=(\w+)", shown).group(1) if "JobState=" in shown else ""
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            break
        time.sleep(0.5)
    else:
        subprocess.run(["scancel", job], env=env, timeout=20)
        raise AssertionError(f"batch job {job} did not end within 200 s: a hang")
    return (0 if state == "COMPLETED" else 1), unwrapped(state + "\n" + (log.read_text() if log.exists() else ""))


def test_sbatch_of_the_repository_script_on_a_cpu_partition(slurm, tmp_path):
    rc, output = sbatch(slurm, tmp_path, "--quick", "--world-sizes", "2,4", "--no-plot")
    assert rc == 0, output
    assert "1 node(s) x 4 rank(s) on CPUs via srun" in output, output
    rows = checked_rows(tmp_path / "job" / "cpu", {2, 4})
    assert set(rows["tag"]) == {"cpu"}
    assert set(rows["nodes"]) == {1}  # one real node: the launcher's layout, not a simulated one
    assert json.loads((tmp_path / "job" / "cpu" / "meta.json").read_text())["launcher"] == "slurm"


def test_sbatch_names_a_killed_rank_and_keeps_rows(slurm, tmp_path):
    rc, output = sbatch(slurm, tmp_path, "--world-sizes", "4", *SMALL,
                        fault="rank=0,after_rows=2,action=kill")
    assert rc != 0, output
    assert "missing rank 0 (the store's host) is gone" in output, output
    assert "missing rank unknown" not in output
    assert len(checked_rows(tmp_path / "job" / "cpu", {4})) == 2
