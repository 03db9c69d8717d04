"""`allreduce-bench k8s`'s manifests checked without a cluster: every kind, layout and command
against its controller's own CRD schema (vendored in schemas/, README.md there) with jsonschema,
and the pods inside against Kubernetes' own schemas (kubernetes-validate); broken manifests are
refused by the same check. No processes: the fast tier."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.k8s.manifests import DNS_LABEL, KINDS, Options, manifest

SCHEMAS = Path(__file__).parent / "schemas"
CRDS = {"jobset": "jobset.x-k8s.io_jobsets.yaml", "mpijob": "kubeflow.org_mpijobs.yaml",
        "trainjob": "trainer.kubeflow.org_trainjobs.yaml"}
KUBERNETES = "1.32"  # the kubectl of Debian's kubernetes-client here; the oldest the CRDs' fields need is older


def _strict(schema):
    """The schema with unknown fields refused where the API server refuses them: kubectl's
    default --validate=strict asks for fieldValidation=Strict, which rejects a field the
    structural schema does not declare, except under x-kubernetes-preserve-unknown-fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    found = {k: _strict(v) for k, v in schema.items()}
    if "properties" in found and "additionalProperties" not in found \
            and not found.get("x-kubernetes-preserve-unknown-fields"):
        found["additionalProperties"] = False
    return found


def _load(kind: str) -> tuple[dict, jsonschema.Draft7Validator]:
    crd = yaml.load((SCHEMAS / CRDS[kind]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == KINDS[kind].api_version.split("/")[1])
    return crd, jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


LOADED = {kind: _load(kind) for kind in CRDS}  # once per module: the three schemas are 2 MB of YAML


def _pod_templates(kind: str, m: dict) -> list[dict]:
    """The built-in objects inside, as Kubernetes would receive them: JobSet's Jobs, MPIJob's
    pod templates, and the pod a TrainJob's trainer and runtime patch describe together."""
    spec = m["spec"]
    if kind == "jobset":
        return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": r["name"]},
                 "spec": r["template"]["spec"]}
                for r in spec["replicatedJobs"] if "template" in r]
    if kind == "mpijob":
        templates = [r["template"] for r in spec.get("mpiReplicaSpecs", {}).values()]
    else:
        trainer, patch = spec["trainer"], spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        pod = copy.deepcopy(patch["replicatedJobs"][0]["template"]["spec"]["template"])
        container = pod["spec"]["containers"][0]
        container.update({k: trainer[k] for k in ("image", "command", "env") if k in trainer})
        if "resourcesPerNode" in trainer:
            container["resources"] = trainer["resourcesPerNode"]
        templates = [pod]
    return [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": t} for t in templates]


def problems(kind: str, m: dict) -> list[str]:
    """Every refusal: the CRD's schema (strict), then Kubernetes' own of each pod template."""
    found = [f"{kind} {'.'.join(map(str, e.absolute_path))}: {e.message}" for e in LOADED[kind][1].iter_errors(m)]
    for obj in _pod_templates(kind, m):
        try:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            found.append(f"{obj['kind']} {'.'.join(map(str, error.path))}: {error.message}")
    return found


LAYOUTS = {"1x8": Options(nodes=1, gpus_per_node=8),
           "2x8-rdma-pvc": Options(nodes=2, gpus_per_node=8, rdma=("rdma/ib", 8), results="bench-results",
                                   env=(("NCCL_DEBUG", "INFO"), ("NCCL_IB_HCA", "mlx5"))),
           "4x4-scheduled": Options(nodes=4, gpus_per_node=4, name="ab", namespace="gpu-team",
                                    node_selector=(("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),),
                                    tolerations=(("nvidia.com/gpu", None, "NoSchedule"), ("dedicated", "bench", None))),
           "16x0-cpu": Options(nodes=16, gpus_per_node=0, image="registry.example.com/team/allreduce-bench:0.1")}
COMMANDS = {"run": ("run", "--sizes", "1M,64M"), "health": ("health", "--sizes", "1M"), "links": ("links", "--quick")}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", CRDS)
def test_every_manifest_validates_against_its_controllers_schema(kind, layout, command):
    options = Options(**{**LAYOUTS[layout].__dict__, "command": COMMANDS[command]})
    m = manifest(kind, options)
    assert problems(kind, m) == []
    assert yaml.safe_load(yaml.safe_dump(m, sort_keys=False)) == m  # the YAML printed is the manifest


def _set(path: tuple, value):
    def change(m):
        *parents, last = path
        target = m
        for key in parents:
            target = target[key]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
    return change


DELETE = object()
RJ = ("spec", "replicatedJobs", 0)
JOB_CONTAINER = (*RJ, "template", "spec", "template", "spec", "containers", 0)
WORKER = ("spec", "mpiReplicaSpecs", "Worker")
PATCH_CONTAINER = ("spec", "runtimePatches", 0, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", 0,
                   "template", "spec", "template", "spec", "containers", 0)
BROKEN = {  # (what, change, the field the refusal names)
    "jobset": [("wrong type", _set((*RJ, "replicas"), "1"), "replicas"),
               ("unknown field", _set(("spec", "replicatedJob"), []), "replicatedJob"),
               ("unknown field in the pod", _set((*JOB_CONTAINER, "gpus"), 8), "gpus"),
               ("missing required", _set((*RJ, "template"), DELETE), "template")],
    "mpijob": [("wrong type", _set(("spec", "slotsPerWorker"), "8"), "slotsPerWorker"),
               ("unknown field", _set((*WORKER, "replica"), 2), "replica"),
               ("unknown field in the pod", _set((*WORKER, "template", "spec", "containers", 0, "gpus"), 8), "gpus"),
               ("missing required", _set(("spec", "mpiReplicaSpecs"), DELETE), "mpiReplicaSpecs")],
    "trainjob": [("wrong type", _set(("spec", "trainer", "numNodes"), "2"), "numNodes"),
                 ("unknown field", _set(("spec", "trainer", "nodes"), 2), "nodes"),
                 ("unknown field in the pod", _set((*PATCH_CONTAINER, "gpus"), 8), "gpus"),
                 ("missing required", _set(("spec", "runtimeRef"), DELETE), "runtimeRef")],
}


@pytest.mark.parametrize("kind,what,change,field", [(k, *b) for k, broken in BROKEN.items() for b in broken],
                         ids=[f"{k}-{b[0]}" for k, broken in BROKEN.items() for b in broken])
def test_a_broken_manifest_is_refused_by_the_same_check(kind, what, change, field):
    m = manifest(kind, Options(nodes=2, gpus_per_node=8))
    change(m)
    found = problems(kind, m)
    assert found and any(field in line for line in found), (what, found)


def test_trainjob_names_are_checked_as_its_crd_rule_checks():
    """The TrainJob CRD's own CEL rule on metadata.name (not evaluated by jsonschema) is the
    pattern `check` applies to every kind's --name."""
    rules = json.dumps(LOADED["trainjob"][0])
    assert "self.metadata.name.matches('^" + DNS_LABEL.pattern + "$')" in rules
    assert "size(self.metadata.name) <= 63" in rules


@pytest.mark.parametrize("args,message", [
    (["--nodes", "0"], "--nodes 0: a job needs at least 1 node"),
    (["--name", "Bad_Name"], "--name 'Bad_Name': Kubernetes takes lower-case letters"),
    (["--name", "a" * 55, "--nodes", "100"], "would name a pod"),
    (["--image", "my image"], "--image 'my image': an image reference has no spaces"),
    (["--namespace", "Team"], "--namespace 'Team': not a namespace name"),
    (["--env", "NCCL_DEBUG"], "--env 'NCCL_DEBUG': give NAME=VALUE"),
    (["--env", "1X=2"], "--env 1X=...: not a variable name"),
    (["--rdma", "rdma/ib"], "--rdma 'rdma/ib': give RESOURCE=COUNT"),
    (["--toleration", "gpu:Sometimes"], "effect 'Sometimes' is none of"),
    (["--results", "My PVC"], "--results 'My PVC'"),
])
@pytest.mark.parametrize("kind", CRDS)
def test_bad_input_is_one_line_exit_2(kind, args, message):
    result = CliRunner().invoke(main, ["k8s", kind, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


def test_the_command_prints_the_manifest_or_writes_it(tmp_path):
    args = ["k8s", "mpijob", "--nodes", "3", "--gpus-per-node", "4", "--env", "NCCL_DEBUG=INFO",
            "--toleration", "dedicated=bench:NoSchedule", "--rdma", "rdma/ib=4", "--", "health", "--sizes", "1M"]
    printed = yaml.safe_load(CliRunner().invoke(main, args).output)
    expected = manifest("mpijob", Options(nodes=3, gpus_per_node=4, env=(("NCCL_DEBUG", "INFO"),),
                                          tolerations=(("dedicated", "bench", "NoSchedule"),), rdma=("rdma/ib", 4),
                                          command=("health", "--sizes", "1M")))
    assert printed == expected and problems("mpijob", printed) == []
    result = CliRunner().invoke(main, [*args[:2], "--out", str(tmp_path / "job.yaml"), *args[2:]])
    assert result.exit_code == 0 and yaml.safe_load((tmp_path / "job.yaml").read_text()) == expected
    default = yaml.safe_load(CliRunner().invoke(main, ["k8s", "jobset"]).output)
    assert default["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "command"] == ["torchrun", "-m", "allreduce_bench", "run"]
