"""JobSet, MPIJob and TrainJob manifests as plain dicts from one frozen set of options: shared pod parts,
each kind adding how its controller starts the ranks (doc/cluster.md#kubernetes)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from allreduce_bench.core.environment import DEFAULT_MASTER_PORT, KUBERNETES_NODE_ENV
from allreduce_bench.core.errors import UsageError

EMPTY_DIR = "emptyDir"
# the image's WORKDIR (Dockerfile): the default `results/<stamp>` folders land in this volume
RESULTS_MOUNT = "/workspace/results"
NODE_JOB = "node"  # the replicated job (and container) of the ranks: TrainJob's torch runtime names it so
TORCHRUN = ("torchrun", "-m", "allreduce_bench")  # its layout from the PET_* variables
PATCH_MANAGER = "allreduce-bench.io/k8s"
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # RFC 1035, as the controllers check names
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Options:
    """What `allreduce-bench k8s` was given, checked by `check`."""

    nodes: int = 2
    gpus_per_node: int = 8
    image: str = "allreduce-bench:latest"
    namespace: str = "default"
    name: str = "allreduce-bench"
    command: tuple[str, ...] = ("run",)  # the allreduce-bench command and options the ranks run
    env: tuple[tuple[str, str], ...] = ()
    rdma: tuple[str, int] | None = None  # (resource, count per node), e.g. ("rdma/ib", 8)
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str | None, str | None], ...] = ()  # key, value, effect
    results: str = EMPTY_DIR  # or a PersistentVolumeClaim's name
    runtime: str = "torch-distributed"  # TrainJob's ClusterTrainingRuntime

    @property
    def ranks_per_node(self) -> int:
        return max(self.gpus_per_node, 1)  # one rank per GPU; a CPU node runs one (gloo)


NODE_NAME = {"name": KUBERNETES_NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def _user_env(o: Options) -> list[dict]:
    return [{"name": k, "value": v} for k, v in o.env]


def _ranks_container(o: Options) -> dict:
    """What every container running ranks has besides its name and command."""
    limits = {"nvidia.com/gpu": o.gpus_per_node} if o.gpus_per_node else {}
    if o.rdma:
        limits[o.rdma[0]] = o.rdma[1]
    found: dict = {"volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                    {"name": "results", "mountPath": RESULTS_MOUNT}]}
    if limits:
        found["resources"] = {"limits": limits}
    if o.rdma:  # verbs register (pin) memory: locked memory beyond the default limit
        found["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return found


def _pod_spec(o: Options) -> dict:
    """Volumes and scheduling, the same for every pod of the job."""
    results = {"emptyDir": {}} if o.results == EMPTY_DIR else {"persistentVolumeClaim": {"claimName": o.results}}
    spec: dict = {"volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "results", **results}]}
    if o.node_selector:
        spec["nodeSelector"] = dict(o.node_selector)
    if o.tolerations:
        spec["tolerations"] = [{"key": k, "operator": "Exists" if v is None else "Equal",
                                **({} if v is None else {"value": v}), **({"effect": e} if e else {})}
                               for k, v, e in o.tolerations]
    return spec


def _pod(o: Options, container: dict, *, ranks: bool = True) -> dict:
    spec = _pod_spec(o)
    if not ranks:  # MPIJob's launcher: mpirun only, no GPU and no results
        spec = {k: v for k, v in spec.items() if k != "volumes"}
    extra = _ranks_container(o) if ranks else {}
    return {"spec": {"containers": [{"name": container.pop("name"), "image": o.image, **container, **extra}], **spec}}


def _master(o: Options) -> str:
    """The first pod's DNS name: <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>
    (the subdomain defaults to the JobSet's name; a TrainJob's JobSet is named after it)."""
    return f"{o.name}-{NODE_JOB}-0-0.{o.name}"


def jobset(o: Options) -> dict:
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    layout = [{"name": "PET_NNODES", "value": str(o.nodes)},
              {"name": "PET_NPROC_PER_NODE", "value": str(o.ranks_per_node)},
              {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": index}}},
              {"name": "PET_MASTER_ADDR", "value": _master(o)},
              {"name": "PET_MASTER_PORT", "value": str(DEFAULT_MASTER_PORT)}]
    pod = _pod(o, {"name": NODE_JOB, "command": [*TORCHRUN, *o.command], "env": [*layout, NODE_NAME, *_user_env(o)],
                   "ports": [{"containerPort": DEFAULT_MASTER_PORT}]})
    pod["spec"]["restartPolicy"] = "Never"
    job = {"parallelism": o.nodes, "completions": o.nodes, "completionMode": "Indexed", "backoffLimit": 0,
           "template": pod}
    return {"network": {"enableDNSHostnames": True}, "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": NODE_JOB, "replicas": 1, "template": {"spec": job}}]}


def mpirun(o: Options) -> list[str]:
    """The launcher's command: rank 0 runs on the first worker (the hostfile's first line), whose
    DNS name is MASTER_ADDR; ssh starts the ranks, so the environment travels with -x."""
    master = f"{o.name}-worker-0.{o.name}.{o.namespace}.svc"
    exported = [arg for k, _ in o.env for arg in ("-x", k)]
    return ["mpirun", "--allow-run-as-root", "-np", str(o.nodes * o.ranks_per_node), "--bind-to", "none",
            "-x", "PATH", "-x", f"MASTER_ADDR={master}", "-x", f"MASTER_PORT={DEFAULT_MASTER_PORT}", *exported,
            "python", "-m", "allreduce_bench", *o.command]


def mpijob(o: Options) -> dict:
    # a rank started over ssh sees sshd's environment, not the pod's: sshd passes the node name on
    sshd = ["/usr/sbin/sshd", "-De", "-o", f"SetEnv={KUBERNETES_NODE_ENV}=$({KUBERNETES_NODE_ENV})"]
    launcher = _pod(o, {"name": "launcher", "command": mpirun(o), "env": _user_env(o)}, ranks=False)
    worker = _pod(o, {"name": "worker", "command": sshd, "env": [NODE_NAME]})
    return {"slotsPerWorker": o.ranks_per_node, "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                                "Worker": {"replicas": o.nodes, "restartPolicy": "Never", "template": worker}}}


def trainjob(o: Options) -> dict:
    """The torch runtime sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and
    PET_MASTER_PORT (reserved: a TrainJob may not set them); the pods' parts go in a runtime patch."""
    parts = _ranks_container(o)
    trainer = {"image": o.image, "command": [*TORCHRUN, *o.command], "env": [NODE_NAME, *_user_env(o)],
               "numNodes": o.nodes, "numProcPerNode": o.ranks_per_node,
               **({"resourcesPerNode": parts.pop("resources")} if "resources" in parts else {})}
    pod = {"spec": {**_pod_spec(o), "containers": [{"name": NODE_JOB, **parts}]}}
    patch = {"replicatedJobs": [{"name": NODE_JOB, "template": {"spec": {"template": pod}}}]}
    return {"runtimeRef": {"name": o.runtime, "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
            "trainer": trainer,
            "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": patch}}}]}


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    spec: Callable[[Options], dict]
    longest_name: Callable[[Options], str]  # the longest name its controller derives (a DNS label)


def _pod_name(o: Options) -> str:
    """The last pod's name with the 5 characters Kubernetes appends, as JobSet checks it (TrainJob's too)."""
    return f"{o.name}-{NODE_JOB}-0-{o.nodes - 1}-abcde"


KINDS = {"jobset": Kind("jobset.x-k8s.io/v1alpha2", "JobSet", jobset, _pod_name),
         "mpijob": Kind("kubeflow.org/v2beta1", "MPIJob", mpijob, lambda o: f"{o.name}-worker-{o.nodes - 1}"),
         "trainjob": Kind("trainer.kubeflow.org/v1alpha1", "TrainJob", trainjob, _pod_name)}


def check(kind: Kind, o: Options) -> None:
    """Bad input, as the API server or the controller would refuse it, as one line."""
    longest = kind.longest_name(o)
    problems = [
        (o.nodes < 1, f"--nodes {o.nodes}: a job needs at least 1 node"),
        (o.gpus_per_node < 0, f"--gpus-per-node {o.gpus_per_node}: give 0 (CPU nodes) or more"),
        (not DNS_LABEL.fullmatch(o.name), f"--name {o.name!r}: Kubernetes takes lower-case letters, digits "
         "and '-', starting with a letter and ending with a letter or digit (RFC 1035)"),
        (len(longest) > 63, f"--name {o.name!r}: too long, {kind.kind}'s controller would name a pod "
         f"{longest!r} ({len(longest)} characters, at most 63)"),
        (not DNS_1123.fullmatch(o.namespace) or len(o.namespace) > 63, f"--namespace {o.namespace!r}: not a "
         "namespace name (lower-case letters, digits and '-', RFC 1123)"),
        (not o.image or any(c.isspace() for c in o.image), f"--image {o.image!r}: an image reference has no spaces"),
        (o.results != EMPTY_DIR and not DNS_1123.fullmatch(o.results), f"--results {o.results!r}: give "
         f"{EMPTY_DIR} or a PersistentVolumeClaim's name"),
        (o.rdma is not None and o.rdma[1] < 1, "--rdma: give RESOURCE=COUNT with a count of 1 or more, e.g. rdma/ib=8"),
    ]
    problems += [(not ENV_NAME.fullmatch(k), f"--env {k}=...: not a variable name") for k, _ in o.env]
    problems += [(e is not None and e not in EFFECTS, f"--toleration {k}: effect {e!r} is none of "
                  f"{', '.join(EFFECTS)}") for k, _, e in o.tolerations]
    for bad, said in problems:
        if bad:
            raise UsageError(said)


def manifest(kind_name: str, o: Options) -> dict:
    kind = KINDS[kind_name]
    check(kind, o)
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": o.name, "namespace": o.namespace}, "spec": kind.spec(o)}
