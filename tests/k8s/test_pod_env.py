"""Each kind's pods reproduced on this machine: the manifest's own command and environment, what
its controller adds (cited per kind below), and the project's ranks under them. A "node" is a UTS
namespace with the pod's hostname and a mount namespace whose /etc/hosts resolves the pods' DNS
names, on this machine's loopback (root only). Each kind runs twice: rank_probe.py in place of
allreduce_bench (what every rank reads: rank, local rank, node rank, world size, master, host,
Kubernetes node), then `run --quick` (what meta.json and results.csv record).

Controllers, read at the commits of schemas/README.md:
- JobSet (kubernetes-sigs/jobset): the webhook defaults completionMode Indexed and
  network.enableDNSHostnames true (pkg/webhooks/jobset_webhook.go); job `<jobset>-<rjob>-<job
  index>` (pkg/util/placement/placement.go GenJobName); pods reachable as
  `<jobset>-<rjob>-<job index>-<pod index>.<subdomain>`, the subdomain the JobSet's name
  (api/jobset/v1alpha2/jobset_types.go Network, pkg/controllers/jobset_controller.go GetSubdomain).
  Kubernetes' Job controller names an Indexed Job's pod hostname `<job>-<index>`, sets
  JOB_COMPLETION_INDEX and the annotation batch.kubernetes.io/job-completion-index
  (kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode).
- TrainJob (kubeflow/trainer): the torch plugin sets PET_NNODES (numNodes), PET_NPROC_PER_NODE
  (numProcPerNode), PET_NODE_RANK (the completion index), PET_MASTER_ADDR
  `<trainjob>-node-0-0.<trainjob>` and PET_MASTER_PORT 29500 (pkg/runtime/framework/plugins/torch/
  torch.go, pkg/constants/constants.go ContainerTrainerPort); the pods are a JobSet of the
  TrainJob's name, replicated job `node` (manifests/base/runtimes/torch_distributed.yaml).
- MPIJob (kubeflow/mpi-operator, pkg/controller/mpi_job_controller.go): worker i's hostname
  `<job>-worker-<i>`, subdomain `<job>`; /etc/mpi/hostfile lines `<job>-worker-<i>.<job>.<ns>.svc
  slots=<slotsPerWorker>`; the launcher's OMPI_MCA_orte_keep_fqdn_hostnames=true,
  OMPI_MCA_orte_default_hostfile, OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10",
  OMPI_MCA_orte_set_default_slots and K_MPI_JOB_ROLE; ranks start over ssh (an ssh stand-in here:
  the session environment sshd gives, PATH, HOME and the worker command's SetEnv)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from allreduce_bench.core.environment import KUBERNETES_NODE_ENV
from allreduce_bench.k8s.manifests import Options, manifest

IN_POD = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'


def _can_make_pods() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare"
    done = subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", IN_POD, "/etc/hosts", "x", "true"],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"unshare: {done.stderr.strip()}"


WHY_NOT = _can_make_pods()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]
NODES, RANKS, NAME, NAMESPACE = 2, 2, "ab", "bench"
KUBE_NODES = [f"gke-pool-{i}" for i in range(NODES)]  # what spec.nodeName would say
RUN = ("run", "--quick", "--sizes", "4K", "--algos", "native", "--no-plot")
PROBE = str(Path(__file__).parent / "rank_probe.py")
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _options(out: Path) -> Options:
    return Options(nodes=NODES, gpus_per_node=RANKS, name=NAME, namespace=NAMESPACE,
                   env=(("GLOO_SOCKET_IFNAME", "lo"),), command=(*RUN, "--out", str(out)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _resolved(env: list[dict], node: int) -> dict[str, str]:
    """A container's env as the kubelet fills it: values, and the downward API's fields."""
    fields = {"spec.nodeName": KUBE_NODES[node], INDEX: str(node)}
    return {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]] for e in env}


def _hosts_file(tmp_path: Path, addresses: dict[str, str]) -> Path:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n} {n.split('.')[0]}\n" for n, a in addresses.items()))
    return path


def _program(command: list[str], probe: bool) -> list[str]:
    """The pod's command with this machine's interpreter, and the probe in place of the suite."""
    at = command.index("allreduce_bench")
    ranks = [PROBE] if probe else ["-m", "allreduce_bench", *command[at + 1:]]
    if command[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *command[1:at - 1], *ranks]
    return ["mpirun.openmpi", *command[1:at - 2], sys.executable, *ranks]


def _probed(outputs: list[str]) -> list[dict]:
    found = [json.loads(line.split("rank-probe ", 1)[1]) for out in outputs for line in out.splitlines()
             if "rank-probe " in line]
    return sorted(found, key=lambda f: f["rank"])


def _expect(ranks: list[dict], hosts: list[str], launcher: str, master: list) -> None:
    assert [r["rank"] for r in ranks] == list(range(NODES * RANKS)), ranks
    for r in ranks:
        node = r["rank"] // RANKS
        assert r == {"rank": r["rank"], "world_size": NODES * RANKS, "local_rank": r["rank"] % RANKS,
                     "local_world_size": RANKS, "node_rank": node, "launcher": launcher, "master": master,
                     "host": hosts[node], "node": KUBE_NODES[node]}


def _expect_run(out: Path, hosts: list[str], launcher: str, master: list) -> None:
    meta = json.loads((out / "meta.json").read_text())
    per_rank = [r // RANKS for r in range(NODES * RANKS)]
    assert meta["hostnames"] == [hosts[n] for n in per_rank] and meta["nodes_seen"] == NODES
    assert meta["kubernetes_nodes"] == [KUBE_NODES[n] for n in per_rank] and meta["launcher"] == launcher
    assert [meta["environment"]["MASTER_ADDR"], int(meta["environment"]["MASTER_PORT"])] == master
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) and {(w, n, r) for w, n, r in rows[["world_size", "nodes", "ranks_per_node"]].values} == {
        (NODES * RANKS, NODES, RANKS)}


def _torchrun_pods(tmp_path: Path, container: dict, envs: list[dict], pods: list[str], probe: bool):
    hosts = _hosts_file(tmp_path, {f"{p}.{NAME}": "127.0.0.1" for p in pods})
    started = [subprocess.Popen(["unshare", "--mount", "--uts", "sh", "-c", IN_POD, str(hosts), pod,
                                 *_program(container["command"], probe)],
                                env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for pod, env in zip(pods, envs)]
    outputs = [p.communicate(timeout=300)[0] for p in started]
    assert [p.returncode for p in started] == [0] * NODES, outputs
    return outputs


def _check_torchrun_kind(tmp_path, container: dict, envs: list[dict], pods: list[str]) -> None:
    master = f"{pods[0]}.{NAME}"
    assert [e["PET_MASTER_ADDR"] for e in envs] == [master] * NODES
    assert [e["PET_MASTER_PORT"] for e in envs] == ["29500"] * NODES
    port = _free_port()  # 29500 may be taken on this machine
    envs = [{**e, "PET_MASTER_PORT": str(port)} for e in envs]
    _expect(_probed(_torchrun_pods(tmp_path, container, envs, pods, True)), pods, "torchrun", [master, port])
    _torchrun_pods(tmp_path, container, envs, pods, False)
    _expect_run(tmp_path / "run", pods, "torchrun", [master, port])


def test_jobset_pods(tmp_path):
    m = manifest("jobset", _options(tmp_path / "run"))
    job = m["spec"]["replicatedJobs"][0]
    assert job["template"]["spec"]["completionMode"] == "Indexed" and job["replicas"] == 1
    container = job["template"]["spec"]["template"]["spec"]["containers"][0]
    pods = [f"{NAME}-{job['name']}-0-{i}" for i in range(NODES)]
    envs = [{**_resolved(container["env"], i), "JOB_COMPLETION_INDEX": str(i)} for i in range(NODES)]
    _check_torchrun_kind(tmp_path, container, envs, pods)


def test_trainjob_pods(tmp_path):
    trainer = manifest("trainjob", _options(tmp_path / "run"))["spec"]["trainer"]
    pods = [f"{NAME}-node-0-{i}" for i in range(NODES)]
    torch_plugin = {"PET_NNODES": str(trainer["numNodes"]), "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
                    "PET_MASTER_ADDR": f"{NAME}-node-0-0.{NAME}", "PET_MASTER_PORT": "29500"}
    envs = [{**_resolved(trainer["env"], i), **torch_plugin, "PET_NODE_RANK": str(i), "JOB_COMPLETION_INDEX": str(i)}
            for i in range(NODES)]
    _check_torchrun_kind(tmp_path, trainer, envs, pods)


SSH = """#!/bin/sh
while :; do case "$1" in -o) shift 2;; -*) shift;; *) break;; esac; done  # ssh's options (-x, rsh_args)
host=$1; shift
case "$host" in
{cases}
esac
exec unshare --uts sh -c 'hostname "$0" && exec "$@"' "$short" env -i PATH=/usr/bin:/bin HOME=/root \\
  $session sh -c "$*"
"""


def _sshd_session(worker: dict, node: int) -> str:
    """What the worker's sshd puts in a session: its command's SetEnv, $(VAR) as Kubernetes expands it."""
    env = _resolved(worker["env"], node)
    (setenv,) = [a.split("=", 1)[1] for a in worker["command"] if a.startswith("SetEnv=")]
    return re.sub(r"\$\((\w+)\)", lambda v: env[v.group(1)], setenv)


def _mpi_launch(tmp_path: Path, spec: dict, probe: bool) -> str:
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    fqdns = [f"{NAME}-worker-{i}.{NAME}.{NAMESPACE}.svc" for i in range(NODES)]
    (tmp_path / "hostfile").write_text("".join(f"{f} slots={spec['slotsPerWorker']}\n" for f in fqdns))
    # not this machine's addresses: Open MPI starts a "remote" node's daemon through ssh
    hosts = _hosts_file(tmp_path, {f: f"127.0.0.{2 + i}" for i, f in enumerate(fqdns)})
    cases = "".join(f"  {f}) short={f.split('.')[0]}; session='{_sshd_session(worker, i)}';;\n"
                    for i, f in enumerate(fqdns))
    ssh = tmp_path / "ssh"
    ssh.write_text(SSH.format(cases=cases))
    ssh.chmod(0o755)
    controller = {"OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                  "OMPI_MCA_orte_default_hostfile": str(tmp_path / "hostfile"),
                  "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10", "K_MPI_JOB_ROLE": "launcher",
                  "OMPI_MCA_orte_set_default_slots": str(spec["slotsPerWorker"]), "OMPI_MCA_plm_rsh_agent": str(ssh)}
    env = {**os.environ, **_resolved(launcher["env"], 0), **controller,
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # the image's PATH: its python first
    env.pop(KUBERNETES_NODE_ENV, None)
    done = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && shift && exec "$@"',
                           str(hosts), "_", *_program(launcher["command"], probe)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(shutil.which("mpirun.openmpi") is None, reason="no Open MPI (mpirun.openmpi)")
def test_mpijob_pods(tmp_path):
    spec = manifest("mpijob", _options(tmp_path / "run"))["spec"]
    command = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    master = f"{NAME}-worker-0.{NAME}.{NAMESPACE}.svc"
    assert f"MASTER_ADDR={master}" in command and "MASTER_PORT=29500" in command
    port = _free_port()
    at = command.index("MASTER_PORT=29500")
    spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] = [
        *command[:at], f"MASTER_PORT={port}", *command[at + 1:]]
    pods = [f"{NAME}-worker-{i}" for i in range(NODES)]
    _expect(_probed([_mpi_launch(tmp_path, spec, True)]), pods, "openmpi", [master, port])
    _mpi_launch(tmp_path, spec, False)
    _expect_run(tmp_path / "run", pods, "openmpi", [master, port])
