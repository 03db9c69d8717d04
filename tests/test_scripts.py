"""The cluster scripts: valid bash, and what they would run for a given (fake) job environment."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["slurm_allreduce.sbatch", "torchrun_multinode.sh", "mpirun_allreduce.sh"]
IB_ONLY = "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0"


def dry_run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The script with DRY_RUN=1 (prints its commands) in a clean environment plus `env`."""
    clean = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "DRY_RUN": "1", **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / script), *args], env=clean,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse(script):
    assert shutil.which("bash")
    done = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


SLURM_JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}


def test_slurm_srun_recipe():
    done = dry_run("slurm_allreduce.sbatch", "--max-bytes", "1G", SLURM_GPUS_PER_NODE="h100:4",
                   **SLURM_JOB)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[1:]
    srun = "srun --nodes=2 --ntasks-per-node=4 --kill-on-bad-exit=1 python -m allreduce_bench run"
    assert lines == [
        f"{srun} --tag nvlink --out results/slurm-77/nvlink --max-bytes 1G",
        f"export {IB_ONLY}",
        f"{srun} --tag ib --out results/slurm-77/ib --max-bytes 1G",
        "python -m allreduce_bench plot results/slurm-77/nvlink results/slurm-77/ib "
        "--out-dir results/slurm-77/plots",
    ]


def test_slurm_torchrun_recipe_meets_on_the_first_node():
    done = dry_run("slurm_allreduce.sbatch", LAUNCH="torchrun", SLURM_NTASKS_PER_NODE="8",
                   SLURM_GPUS_ON_NODE="8", **SLURM_JOB)
    assert done.returncode == 0, done.stderr
    runs = [line for line in done.stdout.splitlines() if line.startswith("srun")]
    assert len(runs) == 2
    for run, tag in zip(runs, ("nvlink", "ib")):
        assert "--ntasks-per-node=1" in run and "--nnodes=2 --nproc-per-node=8" in run
        assert f"--rdzv-endpoint=gpu07:29400 --rdzv-id=allreduce-bench-77-{tag}" in run
        assert run.endswith(f"-m allreduce_bench run --tag {tag} --out results/slurm-77/{tag}")


@pytest.mark.parametrize("gpus,ranks", [({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 4),
                                        ({"SLURM_GPUS_ON_NODE": "2"}, 2)])
def test_slurm_gpu_count_comes_from_the_job(gpus, ranks):
    done = dry_run("slurm_allreduce.sbatch", **gpus, **SLURM_JOB)
    assert done.returncode == 0, done.stderr
    assert f"--nodes=2 --ntasks-per-node={ranks} " in done.stdout.splitlines()[1]
    assert "--tag ib" in done.stdout


def test_slurm_cpu_partition_recipe_uses_the_jobs_tasks():
    """No GPU directive, no GPUs in the job: one gloo run over the job's tasks, tagged cpu."""
    done = dry_run("slurm_allreduce.sbatch", "--quick", SLURM_JOB_ID="9", SLURM_JOB_NUM_NODES="1",
                   SLURM_JOB_NODELIST="vm", SLURM_NTASKS="4", SLURM_TASKS_PER_NODE="4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "allreduce-bench: 1 node(s) x 4 rank(s) on CPUs via srun -> results/slurm-9",
        "srun --ntasks=4 --kill-on-bad-exit=1 python -m allreduce_bench run --tag cpu "
        "--out results/slurm-9/cpu --quick",
        "python -m allreduce_bench plot results/slurm-9/cpu --out-dir results/slurm-9/plots",
    ]
    directives = [line for line in (ROOT / "scripts" / "slurm_allreduce.sbatch").read_text()
                  .splitlines() if line.startswith("#SBATCH")]
    assert not [d for d in directives if "gpu" in d or "exclusive" in d], directives


@pytest.mark.parametrize("missing", ["SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST"])
def test_slurm_script_outside_a_job_says_what_is_missing(missing):
    env = {k: v for k, v in SLURM_JOB.items() if k != missing}
    done = dry_run("slurm_allreduce.sbatch", SLURM_NTASKS_PER_NODE="8", **env)
    assert done.returncode != 0 and missing in done.stderr and not done.stdout


def test_torchrun_script_from_slurm_variables_and_by_hand():
    done = dry_run("torchrun_multinode.sh", "--quick", SLURM_NODEID="1", SLURM_GPUS_ON_NODE="8",
                   **SLURM_JOB)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3  # not the first node: no plot
    assert lines[0] == ("python -m torch.distributed.run --nnodes=2 --nproc-per-node=8 "
                        "--rdzv-backend=c10d --rdzv-endpoint=gpu07:29400 --rdzv-id=slurm-77-nvlink "
                        "-m allreduce_bench run --tag nvlink --out results/torchrun-slurm-77/nvlink "
                        "--quick")
    assert lines[1] == f"export {IB_ONLY}" and "--tag ib" in lines[2]

    done = dry_run("torchrun_multinode.sh", NNODES="4", CUDA_VISIBLE_DEVICES="0,1",
                   RDZV_HOST="head", RDZV_ID="b1", RDZV_PORT="5000", OUT_ROOT="r")
    lines = done.stdout.splitlines()
    assert "--nnodes=4 --nproc-per-node=2" in lines[0] and "--rdzv-endpoint=head:5000" in lines[0]
    assert lines[-1] == "python -m allreduce_bench plot r/nvlink r/ib --out-dir r/plots"

    # no GPUs: one gloo run of the ranks asked for
    done = dry_run("torchrun_multinode.sh", "--quick", NNODES="2", NPROC_PER_NODE="4",
                   CUDA_VISIBLE_DEVICES="", RDZV_HOST="head", RDZV_ID="b1", OUT_ROOT="r")
    assert done.stdout.splitlines() == [
        "python -m torch.distributed.run --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d "
        "--rdzv-endpoint=head:29400 --rdzv-id=b1-cpu -m allreduce_bench run --tag cpu "
        "--out r/cpu --quick",
        "python -m allreduce_bench plot r/cpu --out-dir r/plots"]

    done = dry_run("torchrun_multinode.sh", NNODES="2", CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2 and "NPROC_PER_NODE RDZV_HOST RDZV_ID" in done.stderr


@pytest.mark.parametrize("mpi,expected", [
    ("openmpi", "mpirun -np 8 --host n1:4,n2:4 --map-by ppr:4:node --bind-to none -x MASTER_ADDR "
                "-x MASTER_PORT -x PATH -x LD_LIBRARY_PATH -x NCCL_P2P_DISABLE=1 "
                "-x NCCL_SHM_DISABLE=1 -x NCCL_NVLS_ENABLE=0 python -m allreduce_bench run "
                "--tag ib --out r/ib"),
    ("mpich", "mpiexec -n 8 -ppn 4 -hosts n1,n2 -genv MASTER_ADDR n1 -genv MASTER_PORT 29500 "
              "-genv NCCL_P2P_DISABLE 1 -genv NCCL_SHM_DISABLE 1 -genv NCCL_NVLS_ENABLE 0 "
              "python -m allreduce_bench run --tag ib --out r/ib"),
])
def test_mpirun_recipe(mpi, expected):
    done = dry_run("mpirun_allreduce.sh", MPI=mpi, HOSTS="n1,n2", GPUS_PER_NODE="4", OUT_ROOT="r",
                   MPIRUN="mpirun", MPIEXEC="mpiexec")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "--tag nvlink" in lines[0] and "NCCL_P2P_DISABLE" not in lines[0]
    assert lines[1] == expected
    assert lines[2] == "python -m allreduce_bench plot r/nvlink r/ib --out-dir r/plots"


def test_mpirun_cpu_recipe_and_explicit_launchers():
    """RANKS_PER_NODE without GPUs: one run tagged cpu. With MPICH beside Open MPI the script
    calls each by its own name, not whichever `mpirun` the alternatives system chose."""
    done = dry_run("mpirun_allreduce.sh", "--quick", HOSTS="n1", RANKS_PER_NODE="4", OUT_ROOT="r",
                   MPIRUN="mpirun.openmpi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mpirun.openmpi -np 4 --host n1:4 --map-by ppr:4:node --bind-to none -x MASTER_ADDR "
        "-x MASTER_PORT -x PATH -x LD_LIBRARY_PATH python -m allreduce_bench run --tag cpu "
        "--out r/cpu --quick",
        "python -m allreduce_bench plot r/cpu --out-dir r/plots"]
    done = dry_run("mpirun_allreduce.sh", HOSTS="n1", OUT_ROOT="r")
    assert done.returncode != 0 and "RANKS_PER_NODE" in done.stderr


def gpu_check(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
def test_gpu_check_refuses_without_a_gpu_in_one_line():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: scripts/gpu_check.sh would run")
    done = gpu_check("--no-install")
    assert done.returncode == 2 and not done.stdout
    assert len(done.stderr.splitlines()) == 1 and "no GPU on this machine" in done.stderr


@pytest.mark.parametrize("model,count,out", [
    ("NVIDIA H100 80GB HBM3", "8", "results/example-h100-80gb-hbm3-8gpu"),
    ("NVIDIA GeForce RTX 4090", "1", "results/example-rtx-4090-1gpu"),
    ("Tesla T4", "2", "results/example-tesla-t4-2gpu"),
])
def test_gpu_check_names_its_output_by_model_and_count(model, count, out):
    done = gpu_check("--name", model, count)
    assert done.returncode == 0 and done.stdout == out + "\n", done.stderr


@pytest.mark.parametrize("args,says", [
    (["--bogus"], "unknown argument '--bogus'"),
    (["--out", "/tmp/elsewhere"], "must be under results/"),
    (["--out", "results/../x"], "must be under results/"),
    (["--name", "T4", "0"], "positive integer"),
    (["--out"], "--out needs a directory"),
    (["--budget", "5m"], "--budget needs a whole number of seconds"),
])
def test_gpu_check_bad_arguments_are_one_line_and_exit_2(args, says):
    done = gpu_check(*args)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.splitlines()) == 1


def test_gpu_check_estimates_one_gpu_within_3_minutes_and_twice_fits_15():
    """--dry-run --gpus 1: the plan and its estimate, at most 180 s on one GPU, and the steps'
    limits added up twice within a lent machine's 15 minutes (issue 54: step 2 alone modelled
    at 20 minutes against its 170-s limit)."""
    done = gpu_check("--dry-run", "--gpus", "1")
    assert done.returncode == 0, done.stderr
    estimate = int(re.search(r"estimate (\d+) s", done.stdout)[1])
    limits = int(re.search(r"(\d+) s in all", done.stdout)[1])
    assert estimate <= 180 and 2 * limits <= 15 * 60, done.stdout


def test_gpu_check_pre_flight_names_a_missing_scipy(tmp_path):
    """scipy, which core/measure/rounds.py imports mid-run, is checked before any step."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_check.sh", tmp_path / "scripts")
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text("import sys\nsys.modules['scipy'] = None\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{tmp_path / 'hide'}:{ROOT}", "GPU_CHECK_CPU_RANKS": "1"}
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu_check.sh"), "--no-install", "--budget", "30"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and "missing Python packages: scipy" in done.stderr, done.stdout + done.stderr


def test_gpu_check_expands_no_empty_array():
    """Before bash 4.4, "${A[@]}" of an empty array is an unbound variable under set -u: the
    script keeps options that may be empty in plain words (5e7e81d: RUN_SIZES, QUICK)."""
    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    assert "set -uo pipefail" in text
    assert re.findall(r'"\$\{\w+\[@\]\}"', text) == ['"${A[@]}"']  # the comment saying so


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_check_walk_through_runs_the_shared_gpu_step(tmp_path):
    """GPU_CHECK_CPU_RANKS=1: every step of a one-GPU machine with gloo on CPU ranks, the step
    whose ranks share the one GPU included (world sizes 2 and 4). A copy of the script runs in
    a scratch checkout, so its results/ stay out of this one."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_check.sh", tmp_path / "scripts")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "GPU_CHECK_CPU_RANKS": "1",
           "HOME": os.environ.get("HOME", str(tmp_path))}
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu_check.sh"), "--no-install"],
                          env=env, capture_output=True, text=True, timeout=580, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run (gloo, world sizes 2,4 sharing one GPU): exit 0" in done.stdout
    assert "run sharing one GPU: 4 rows, world sizes [2, 4], backend gloo, #wrong 0" in done.stdout
    assert "world size 1, time per call (us)" in done.stdout  # no peak busbw of 0
    assert re.search(r"spin: 1K at --loops 100: [\d.]+ us a call, at --loops 5000", done.stdout)
    run = pd.read_csv(tmp_path / "results" / "example-cpu-test-1gpu" / "results.csv")
    assert sorted(run["algorithm"].unique()) == ["native"]  # N=1: the backend's own call only
    shared = tmp_path / "results" / "example-cpu-test-1gpu" / "shared-gpu"
    assert (shared / "plots" / "report.html").exists()


def harness_costs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp"),
           "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "harness_costs.py"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_harness_costs_fits_and_extrapolates_what_an_earlier_run_wrote(tmp_path):
    """--table-from: the table of runs at N = 2-32, each figure's fit named and its value at
    4,096 ranks: a figure linear in N is called linear, one that grows as N^2 quadratic."""
    figures = ["rank0_up_s", "last_rank_up_s", "first_sample_s", "row_overhead_ms", "after_samples_ms",
               "finish_s", "wall_s", "cpu_per_rank_s", "meta_kb", "samples_kb", "rank0_peak_mb", "driver_peak_mb"]
    lines = []
    for n in (2, 4, 8, 16, 32):
        run = {"kind": "local", "ranks": n, "nodes": 1, **{key: 1.0 + 0.5 * n for key in figures}}
        run["row_overhead_ms"] = 10.0 + 0.25 * n * n
        lines.append(json.dumps(run))
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    done = harness_costs("--table-from", str(tmp_path / "runs.jsonl"))
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in done.stdout.splitlines()
            if line.startswith("| ")}
    assert "| figure | N=2 | N=4 | N=8 | N=16 | N=32 | fit | at 4,096 | linear | quadratic |" in done.stdout
    assert rows["meta.json (KB)"][6:8] == ["linear", "2,049"]  # 1 + 0.5 x 4,096
    assert rows["per-row overhead (ms)"][6:8] == ["quadratic", "4,194,314"]  # 10 + 0.25 x 4,096^2
    assert max(map(len, done.stdout.splitlines())) <= 120


@pytest.mark.parametrize("args,says", [(["--ranks", "0"], "--ranks takes positive whole numbers"),
                                       (["--nodes", "2x"], "--nodes takes comma-separated whole numbers"),
                                       (["--rows", "1"], "--rows needs at least 2")])
def test_harness_costs_bad_arguments_are_one_line_and_exit_2(args, says):
    done = harness_costs(*args)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.slow
def test_harness_costs_measures_a_world_of_two(tmp_path):
    """--ranks 2 --no-emulate: one real local world of 2 ranks, its figures from the plugin's
    timestamps, the run's files and rank 0's /proc; rank 0's own work timed directly at N=64."""
    done = harness_costs("--ranks", "2", "--no-emulate", "--rows", "2", "--samples", "2", "--direct", "64",
                         "--direct-samples", "5", "--json", str(tmp_path / "runs.jsonl"), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads((tmp_path / "runs.jsonl").read_text())
    assert run["kind"] == "local" and run["ranks"] == 2 and run["rows"] == 2
    assert 0 < run["rank0_up_s"] <= run["first_sample_s"] < run["wall_s"]
    assert run["row_overhead_ms"] > 0 and run["after_samples_ms"] > 0 and run["finish_s"] > 0
    assert run["meta_kb"] > 1 and run["samples_kb"] > 1 and run["rank0_peak_mb"] > 50
    assert "### local gloo, one host: N = 2 ranks" in done.stdout and "| first sample (s) | " in done.stdout
    assert re.search(r"^\| 64 \| [\d.]+ \| [\d.]+ \| 5 \| ", done.stdout, re.M), done.stdout
    assert "harness_costs: local N=2: running" in done.stderr
