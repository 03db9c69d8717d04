"""`allreduce-bench k8s {jobset,mpijob,trainjob}`: options into `manifests.Options`, the manifest as YAML."""
from __future__ import annotations

from pathlib import Path

import click

from allreduce_bench.core.errors import UsageError
from allreduce_bench.k8s.manifests import EMPTY_DIR, KINDS, Options


def _pairs(values, option: str) -> tuple[tuple[str, str], ...]:
    found = tuple(tuple(v.split("=", 1)) for v in values)
    bad = next((v for v, pair in zip(values, found) if len(pair) != 2 or not pair[0]), None)
    if bad is not None:
        raise UsageError(f"{option} {bad!r}: give NAME=VALUE")
    return found


def _toleration(text: str) -> tuple[str, str | None, str | None]:
    """KEY[=VALUE][:EFFECT] -> (key, value or None for `Exists`, effect or None for any)."""
    rest, _, effect = text.partition(":")
    key, equals, value = rest.partition("=")
    if not key:
        raise UsageError(f"--toleration {text!r}: give KEY[=VALUE][:EFFECT], e.g. nvidia.com/gpu:NoSchedule")
    return key, value if equals else None, effect or None


def _rdma(text: str | None) -> tuple[str, int] | None:
    if text is None or text == "none":
        return None
    resource, _, count = text.rpartition("=")
    if not resource or not count.isdigit():
        raise UsageError(f"--rdma {text!r}: give RESOURCE=COUNT per node, e.g. rdma/ib=8, or none")
    return resource, int(count)


@click.command("k8s", short_help="Kubernetes manifests (JobSet, MPIJob, TrainJob) that run the suite.")
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--nodes", type=int, default=2, show_default=True, help="Nodes (pods running ranks).")
@click.option("--gpus-per-node", type=int, default=8, show_default=True,
              help="nvidia.com/gpu per pod, one rank each; 0: CPU nodes, one rank each (gloo).")
@click.option("--image", default=Options.image, show_default=True, help="The image (the repository's Dockerfile).")
@click.option("--namespace", default=Options.namespace, show_default=True)
@click.option("--name", default=Options.name, show_default=True, help="The job's name; pods' names derive from it.")
@click.option("--rdma", help="The RDMA device plugin's resource and count per node, e.g. rdma/ib=8 "
              "(adds the IPC_LOCK capability); none by default.")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="An environment variable of the ranks (NCCL_*, ...); repeatable.")
@click.option("--node-selector", multiple=True, metavar="KEY=VALUE", help="Schedule on nodes so labelled; repeatable.")
@click.option("--toleration", "tolerations", multiple=True, metavar="KEY[=VALUE][:EFFECT]",
              help="Tolerate a taint (KEY alone: any value); repeatable.")
@click.option("--results", default=EMPTY_DIR, show_default=True,
              help=f"The results volume: {EMPTY_DIR} (lives with the pod) or a PersistentVolumeClaim's name.")
@click.option("--runtime", default=Options.runtime, show_default=True,
              help="trainjob: the ClusterTrainingRuntime (Kubeflow Trainer's torch runtime).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Write the YAML here, not to stdout.")
def k8s_command(kind, command, out, **given):
    """Print a KIND manifest that runs the suite on Kubernetes: jobset, mpijob or trainjob.

    \b
    After `--`, the allreduce-bench command and options the ranks run (default: run), e.g.
      allreduce-bench k8s jobset --nodes 4 --image REGISTRY/allreduce-bench -- health
    jobset and trainjob start the ranks with torchrun, mpijob with mpirun (sshd in the workers).
    Every rank's Kubernetes node is in meta.json (kubernetes_nodes). doc/cluster.md#kubernetes.
    """
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no types (types-PyYAML is not a dependency)

    from allreduce_bench.k8s.manifests import manifest

    options = Options(**{**given, "env": _pairs(given["env"], "--env"),
                         "node_selector": _pairs(given["node_selector"], "--node-selector"),
                         "tolerations": tuple(map(_toleration, given["tolerations"])),
                         "rdma": _rdma(given["rdma"]), "command": tuple(command) or Options.command})
    text = yaml.safe_dump(manifest(kind, options), sort_keys=False)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"{KINDS[kind].kind}: {out}", err=True)
