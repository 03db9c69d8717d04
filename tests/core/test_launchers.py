"""Reading rank layouts from torchrun, Slurm, Open MPI and MPICH/PMI environments."""
import pytest

from allreduce_bench.core.environment import (
    RankEnv,
    expand_nodelist,
    export_for_env_init,
    launcher_env,
    parse_tasks_per_node,
)
from allreduce_bench.core.errors import UsageError

SRUN = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242"}  # what makes a Slurm step, not the batch shell

# environment -> (launcher, rank, world size, local rank, local size, node rank, master addr, port)
GOOD = [
    ({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0"},
     ("torchrun", 5, 16, 5, 8, 0, None, None)),
    ({"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"},
     ("torchrun", 9, 16, 1, 8, 1, None, None)),
    ({"RANK": "1", "WORLD_SIZE": "2"},  # bare RANK/WORLD_SIZE: one host
     ("torchrun", 1, 2, 1, 2, 0, None, None)),
    # torchrun inside srun: torchrun's own variables win
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
      "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", **SRUN},
     ("torchrun", 3, 8, 3, 4, 0, None, None)),
    ({"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
      "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[01-04,07]", **SRUN},
     ("slurm", 6, 8, 2, 4, 1, "gpu01", 15000 + 4242)),
    ({"SLURM_PROCID": "9", "SLURM_NTASKS": "10", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
      "SLURM_TASKS_PER_NODE": "4(x2),2", "SLURM_NODELIST": "a[1-2],b3", "MASTER_PORT": "1234",
      **SRUN},
     ("slurm", 9, 10, 1, 2, 2, "a1", 1234)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
      "SLURM_NTASKS_PER_NODE": "8", "SLURM_STEP_NODELIST": "node[008-009]",
      "SLURM_JOB_NODELIST": "other1", "MASTER_ADDR": "10.0.0.1", **SRUN},
     ("slurm", 0, 16, 0, 8, 0, "10.0.0.1", 15000 + 4242)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
     ("openmpi", 3, 4, 3, 4, 0, "127.0.0.1", 29500)),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "head", "MASTER_PORT": "4000",
      # mpirun inside a Slurm batch shell: the shell's SLURM_* must not be taken for ranks
      "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "n[1-2]"},
     ("openmpi", 5, 8, 1, 4, 1, "head", 4000)),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
      "MASTER_ADDR": "n1"},
     ("mpich", 2, 4, 0, 2, 1, "n1", 29500)),
]


@pytest.mark.parametrize("env,expected", GOOD)
def test_launcher_environments(env, expected):
    found = launcher_env(env)
    assert (found.launcher, found.rank, found.world_size, found.local_rank, found.local_world_size,
            found.node_rank, found.master_addr, found.master_port) == expected


@pytest.mark.parametrize("env", [
    {},
    {"PATH": "/usr/bin"},
    # the batch script itself (no srun step): a local run, not rank 0 of 8
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "n[1-2]",
     "SLURM_JOB_ID": "1"},
    # a one-task srun or mpirun step: the suite starts its own local worlds
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1",
     "SLURM_NODELIST": "n1", **SRUN},
    {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
     "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
])
def test_no_launcher_means_a_local_run(env):
    assert launcher_env(env) is None


@pytest.mark.parametrize("env,names", [
    ({"RANK": "0"}, ["WORLD_SIZE"]),
    ({"WORLD_SIZE": "4"}, ["RANK"]),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     ["OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"]),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}, ["MPI_LOCALRANKID"]),
    ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2", **SRUN},
     ["SLURM_NTASKS"]),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", **SRUN},
     ["SLURM_STEP_TASKS_PER_NODE"]),
    ({"RANK": "4", "WORLD_SIZE": "4"}, ["RANK=4", "WORLD_SIZE=4"]),
    ({"RANK": "x", "WORLD_SIZE": "4"}, ["RANK='x'"]),
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
     ["LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"]),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "3",
      "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODELIST": "n[1-2]", **SRUN},
     ["SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID"]),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2",
      "SLURM_JOB_NODELIST": "gpu[01-", **SRUN}, ["gpu[01-", "MASTER_ADDR"]),
    # MPI across hosts needs the first host's address
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, ["MASTER_ADDR"]),
])
def test_partial_or_inconsistent_environment_names_the_variables(env, names):
    with pytest.raises(UsageError) as error:
        launcher_env(env)
    for name in names:
        assert name in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("nodelist,hosts", [
    ("node1", ["node1"]),
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("gpu[008-011]", ["gpu008", "gpu009", "gpu010", "gpu011"]),
    ("x[9-11]", ["x9", "x10", "x11"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("dgx-a100-[3,5-6].cluster", ["dgx-a100-3.cluster", "dgx-a100-5.cluster", "dgx-a100-6.cluster"]),
])
def test_slurm_nodelists(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["", "gpu[01-04", "gpu[4-1]", "gpu[a-b]", "gpu]1["])
def test_bad_nodelists(bad):
    with pytest.raises(UsageError, match="Slurm nodelist"):
        expand_nodelist(bad)


@pytest.mark.parametrize("text,counts", [("8", [8]), ("4(x2)", [4, 4]), ("4(x2),2", [4, 4, 2]),
                                         ("2,3(x1)", [2, 3])])
def test_tasks_per_node(text, counts):
    assert parse_tasks_per_node(text) == counts


def test_export_for_env_init_fills_only_what_is_missing():
    environ = {"MASTER_PORT": "7777"}
    export_for_env_init(RankEnv(5, 8, 1, 4, "slurm", 1, "gpu01", 20100), environ)
    assert environ == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                       "GROUP_RANK": "1", "MASTER_ADDR": "gpu01", "MASTER_PORT": "7777"}
    torchrun = {"MASTER_ADDR": "h", "MASTER_PORT": "1"}
    export_for_env_init(RankEnv(0, 2, 0, 2, "torchrun"), torchrun)
    assert torchrun["MASTER_ADDR"] == "h" and torchrun["RANK"] == "0"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_srun_step_of_two_nodes_runs_end_to_end(tmp_path):
    """Two processes given only Slurm's variables (as srun would, 2 nodes x 1 task) form a world
    through env:// at the nodelist's first host, and measure it as two nodes."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_",
                                                                     "LOCAL_", "MASTER_"))}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "allreduce_bench", "run", "--sizes", "4K", "--algos",
         "ring,hierarchical", "--iters", "1", "--warmup", "0", "--no-plot", "--out",
         str(tmp_path)],
        env={**base, "PYTHONPATH": str(root), "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "9",
             "SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
             "SLURM_NODEID": str(r), "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
             "SLURM_STEP_NODELIST": "localhost", "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    rows = pd.read_csv(tmp_path / "results.csv")
    assert sorted(rows["algorithm"]) == ["hierarchical", "ring"]
    assert set(zip(rows["world_size"], rows["nodes"], rows["ranks_per_node"])) == {(2, 2, 1)}
    assert (rows["wrong"] == 0).all()
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["launcher"] == "slurm" and len(meta["hostnames"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("command,kind", [
    (["links", "--sizes", "4K", "--iters", "1", "--warmup", "0"], "links"),
    (["ddp", "--world-sizes", "2", "--params", "100K", "--layers", "2", "--batch-size", "2",
      "--bucket-mb", "1", "--accum", "2", "--iters", "1", "--warmup", "0"], "ddp"),
])
def test_links_and_ddp_join_an_mpirun_world(tmp_path, command, kind):
    """`links` and `ddp` join a world given only Open MPI's variables, as `run` does."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "RANK",
                                                                     "WORLD_", "LOCAL_", "MASTER_"))}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "allreduce_bench", *command, "--no-plot", "--out", str(tmp_path)],
        env={**base, "PYTHONPATH": str(root), "OMPI_COMM_WORLD_RANK": str(r),
             "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    rows = pd.read_csv(tmp_path / "results.csv")
    assert set(rows["benchmark"]) == {kind} and (rows["wrong"] == 0).all()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_world_of_one_rank_runs_end_to_end(tmp_path):
    """`run --world-sizes 1 --backend gloo`: init, timing and the check of every algorithm on a
    single rank (what gpu_check.sh runs with NCCL on a one-GPU machine)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "allreduce_bench", "run", "--world-sizes", "1", "--backend", "gloo",
         "--quick", "--no-plot", "--out", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(tmp_path / "results.csv")
    assert set(rows["algorithm"]) == {"native"}  # with one rank ring, naive, hierarchical have no steps
    assert "ring, naive, hierarchical are left out" in done.stderr
    assert set(rows["world_size"]) == {1} and set(rows["backend"]) == {"gloo"}
    assert (rows["wrong"] == 0).all() and (rows["time_us_median"] > 0).all()
    assert (rows["busbw_GBps"] == 0).all()  # 2(N-1)/N = 0: one rank moves nothing
