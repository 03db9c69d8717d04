"""`allreduce-bench links`: options and the world check; the measuring is in links/benchmark.py
(imported only when a run starts, so --help needs no torch)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from allreduce_bench.core.cli.floor import MIN_BUSBW_OPTION, checked_floor, judged
from allreduce_bench.core.cli.options import command_hooks, measuring_options
from allreduce_bench.core.cli.run import sweep_options
from allreduce_bench.core.config.launch import LaunchConfig
from allreduce_bench.core.environment import launcher_env
from allreduce_bench.core.errors import UsageError

if TYPE_CHECKING:
    from allreduce_bench.core.measure.context import Run

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


def check_world(launch: LaunchConfig, ranks_per_node_given: bool) -> None:
    """Bad layouts fail here, before any process starts."""
    env = launcher_env()
    if env is not None:
        check_nodes(env.world_size, launch.ranks_per_node or env.local_world_size)
    elif not ranks_per_node_given:
        raise UsageError(f"links needs >= 2 nodes and this is a single node; {HOW_TO_GET_NODES}")
    else:
        check_nodes(max(launch.world_sizes), launch.ranks_per_node or 0)


@click.command("links", short_help="Intra-node vs inter-node bandwidth (NVLink vs InfiniBand) "
               "on >= 2 nodes.")
@click.option("--collective", default="all_reduce", show_default=True,
              help="The backend's collective measured in every group: all_reduce, all_gather, "
              "reduce_scatter, alltoall, broadcast, reduce or sendrecv (operation column).")
@sweep_options
@measuring_options()
@MIN_BUSBW_OPTION
def links(**options):
    """Intra-node vs inter-node bandwidth (NVLink vs InfiniBand), on a world of >= 2 nodes.

    \b
    Per size: the backend's AllReduce (or --collective) inside every node (intra) and across nodes among
    ranks of the same local rank (inter), all groups at once, and a one-way
    send within a node and between nodes (p2p). Rows: benchmark=links,
    link=intra|inter, operation=allreduce (or the collective)|p2p. Under a launcher it uses the whole world;
    locally, give --ranks-per-node L and a world size >= 2L (nodes simulated on
    loopback: both links are then the same), or use `emulate --benchmarks links`.
    """
    from allreduce_bench.core.cli.finish import measure_then_finish
    from allreduce_bench.core.environment import how_started
    from allreduce_bench.core.launch.local import announce
    from allreduce_bench.core.measure.context import Run
    from allreduce_bench.core.measure.device import this_host
    from allreduce_bench.core.units import byte_list
    from allreduce_bench.links.benchmark import BENCHMARK
    from allreduce_bench.links.config import links_config

    floor, hooks = checked_floor(options), command_hooks()
    config = links_config(options, how_started(), this_host(), hooks)
    check_world(config.launch, options["ranks_per_node"] is not None)
    announce(f"allreduce-bench links: backend {config.launch.backend} on {config.launch.device}, "
             f"sizes {byte_list(config.sizes)} -> {config.launch.out_dir}")
    sys.exit(measure_then_finish(Run(config, BENCHMARK, hooks), judged(finish_links, floor, _links_rows)))


def _links_rows(frame):
    return frame[frame["benchmark"] == "links"]


def finish_links(run: Run) -> int:
    """The intra/inter summary and plots/links.png once the ranks have ended."""
    from allreduce_bench.core.cli.finish import finish
    from allreduce_bench.core.environment import launcher_env
    from allreduce_bench.core.measure.meta import close_machine_facts
    from allreduce_bench.core.results.store import read_meta
    from allreduce_bench.links.summary import draw_links, links_summary

    close_machine_facts(run.launch.out_dir, ranks_are_children=launcher_env() is None)

    def summarize(frame) -> str:  # only its figure: an emulated run's allreduce report stays
        figure = draw_links(frame, run.launch.out_dir / "plots") if run.launch.plot else {}
        return (links_summary(frame, read_meta(run.launch.out_dir))
                + "".join(f"\nfigure: {path}" for path in figure.values()))

    return finish(run, summarize, draw=False)
