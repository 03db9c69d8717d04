"""`allreduce-bench links`: options, the world check and the driver; the measuring is in
benchmarks/links.py (imported only when a run starts, so --help needs no torch)."""
from __future__ import annotations

import shlex
import sys

import click

from allreduce_bench.errors import UsageError
from allreduce_bench.launch.environments import launcher_env

HOW_TO_GET_NODES = ("start it on >= 2 nodes (torchrun --nnodes 2 ..., srun, mpirun), emulate them "
                    "on this machine with `allreduce-bench emulate --benchmarks links`, or "
                    "simulate nodes on loopback with `links --ranks-per-node L` and a world size "
                    ">= 2L")


def check_nodes(world_size: int, ranks_per_node: int) -> None:
    if ranks_per_node < 1 or world_size < 2 * ranks_per_node or world_size % ranks_per_node:
        nodes = world_size // max(ranks_per_node, 1)
        raise UsageError(f"links compares intra- and inter-node links and needs >= 2 nodes, but "
                         f"this world is {world_size} rank(s) in {max(nodes, 1)} node(s) of "
                         f"{ranks_per_node}; {HOW_TO_GET_NODES}")


def check_world(config, ranks_per_node_given: bool) -> None:
    """Bad layouts fail here, before any process starts."""
    env = launcher_env()
    if env is not None:
        check_nodes(env.world_size, config.ranks_per_node or env.local_world_size)
    elif not ranks_per_node_given:
        raise UsageError(f"links needs >= 2 nodes and this is a single node; {HOW_TO_GET_NODES}")
    else:
        check_nodes(max(config.world_sizes), config.ranks_per_node)


def run_links(config) -> int:
    from allreduce_bench.analysis.links import links_summary
    from allreduce_bench.benchmarks.links import links_rank_main
    from allreduce_bench.launch.driver import drive, finish
    from allreduce_bench.measure import meta as run_meta
    from allreduce_bench.results.store import start_meta

    def before(config) -> None:
        if launcher_env() is None:
            start_meta(config.out_dir, run_meta.host_meta(config))

    return drive(config, links_rank_main, lambda c: finish(c, links_summary, draw=False),
                 [max(config.world_sizes)], before=before)


def links_command(run_command: click.Command) -> click.Command:
    """`links`, with the options of `run` (less --algos: it always uses the backend's AllReduce)."""

    def callback(**options):
        from allreduce_bench.config.options import run_config
        from allreduce_bench.launch.environments import announce
        given = options["ranks_per_node"] is not None
        config = run_config(command=shlex.join(sys.argv), algos="native", **options)
        check_world(config, given)
        announce(f"allreduce-bench links: backend {config.backend} on {config.device}, "
                 f"{len(config.sizes)} sizes -> {config.out_dir}")
        sys.exit(run_links(config))

    return click.Command(
        "links", callback=callback,
        params=[p for p in run_command.params if p.name not in ("algos", "resume_dir")],
        short_help="Intra-node vs inter-node bandwidth (NVLink vs InfiniBand) on >= 2 nodes.",
        help="Intra-node vs inter-node bandwidth (NVLink vs InfiniBand), on a world of >= 2 "
             "nodes.\n\n\b\nPer size: the backend's AllReduce inside every node (intra) and "
             "across nodes among\nranks of the same local rank (inter), all groups at once, and a "
             "one-way\nsend within a node and between nodes (p2p). Rows: benchmark=links,\n"
             "link=intra|inter, operation=allreduce|p2p. Under a launcher it uses the whole world;\n"
             "locally, give --ranks-per-node L and a world size >= 2L (nodes simulated on\n"
             "loopback: both links are then the same), or use `emulate --benchmarks links`.")
