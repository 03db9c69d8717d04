"""`allreduce-bench expect`: before a run, what busbw to expect from a system, with sources;
`run --expect` prints its first line (`headline`)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import click

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import format_size

if TYPE_CHECKING:
    from allreduce_bench.core.measure.context import Measuring


def _figure(row) -> str:
    layout = (f"{int(row['nodes'])} x {int(row['gpus_per_node'])} {row['gpu']}"
              if row["gpus_per_node"] == row["gpus_per_node"] else f"per {row['nic_Gbps']:g} Gb/s NIC")
    size = f" at {format_size(int(row['size_bytes']))}" if row["size_bytes"] == row["size_bytes"] else ""
    details = ", ".join(x for x in (row["fabric"], row["tool"] + (f" (NCCL {row['nccl']})" if row["nccl"] else ""),
                                    row["setting"]) if x)
    return (f"{row['busbw_GBps']:>8g} GB/s  {row['kind']:<11} {layout}{size}: {details}\n"
            f"{'':22}{row['source']} ({row['date']}): {row['where']}")


def _layouts(known, system, collective: str) -> str:
    """'; none at 2 x 3 H100 (...)' where the catalogue has no figure at the very layout."""
    rows = known[(known["gpu"] == system.model) & (known["collective"] == collective)].dropna(subset=["gpus_per_node"])
    layouts = sorted({(int(r.nodes), int(r.gpus_per_node)) for r in rows.itertuples()})
    if (system.nodes, system.gpus_per_node) in layouts:
        return ""
    return (f"; none at {system.nodes} x {system.gpus_per_node} {system.model} (its layouts: "
            f"{', '.join(f'{n} x {g}' for n, g in layouts) or 'none'})")


def headline(system, collective: str = "all_reduce") -> str:
    from allreduce_bench.expect.catalogue import matching
    from allreduce_bench.expect.system import link_limit

    limit = link_limit(system)
    rows = matching(system.model, system.gpus_per_node, system.nodes, collective)
    closest = (f"closest published figure {rows.iloc[0]['busbw_GBps']:g} GB/s ({rows.iloc[0]['kind']}, "
               f"{rows.iloc[0]['source']})" if len(rows) else "no published figure for this GPU and layout")
    bound = (f"link limit {limit.GBps:.4g} GB/s busbw ({limit.bound})" if limit.GBps
             else f"no link limit ({limit.bound})")
    return f"expect: {collective} on {system.describe()}: {bound}; {closest}"


def run_headline(config: Measuring) -> str:
    """`run --expect`'s line, from this host and the run's layout."""
    from allreduce_bench.core.environment import launcher_env
    from allreduce_bench.expect.system import detect

    launch = config.launch
    if launch.device != "cuda":
        return ("expect: a gloo run on CPU: no published figure applies; the report holds busbw against "
                "the run's own link peak (a point-to-point probe)")
    launched, per_node = launcher_env(), launch.ranks_per_node
    nodes = launched.nodes if launched else -(-max(launch.world_sizes) // per_node) if per_node else 1
    system = detect(nodes)
    ranks = launched.local_world_size if launched else per_node
    if system and ranks:
        system = replace(system, gpus_per_node=ranks)
    return headline(system) if system else "expect: no NVIDIA GPU seen by nvidia-smi on this host"


@click.command("expect")
@click.option("--gpu", help="GPU model or name, e.g. H100, 'NVIDIA B200'. [detected with nvidia-smi]")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="Ranks per node. [this host's GPUs]")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes.")
@click.option("--nics", help="NICs per node x Gb/s each, e.g. 8x400. [this host's active RDMA ports]")
@click.option("--collective", default="all_reduce", show_default=True,
              help="all_reduce, all_gather or reduce_scatter (the catalogue's collectives).")
def expect_command(gpu, gpus_per_node, nodes, nics, collective):
    """What busbw to expect before a run: the published figures that match the system, the
    limit its links set, and the NCCL settings that change the answer, each with its source.

    \b
    Describe the system (--gpu, --gpus-per-node, --nodes, --nics), or run it on a GPU host to
    detect the GPUs and NICs. The catalogue: doc/expect.md.
    """
    from allreduce_bench.core.text import wrapped
    from allreduce_bench.expect.catalogue import ANY, catalogue, links, matching, per_nic, settings
    from allreduce_bench.expect.system import System, detect, link_limit, parse_nics

    known = catalogue()
    if collective not in set(known["collective"]):
        raise UsageError(f"--collective {collective}: the catalogue has figures for "
                         f"{', '.join(sorted(set(known['collective'])))}; name one of them")
    count, rate = parse_nics(nics)
    if gpu is None:
        found = detect(nodes)
        if found is None:
            raise UsageError("no NVIDIA GPU found on this host (nvidia-smi); describe the system, e.g. "
                             "--gpu H100 --gpus-per-node 8 --nodes 2 --nics 8x400")
        system = System(found.device, gpus_per_node or found.gpus_per_node, nodes, count or found.nics_per_node,
                        rate or found.nic_Gbps, said_by=found.said_by)
    elif gpus_per_node is None:
        raise UsageError("--gpu needs --gpus-per-node (the ranks on each node), e.g. --gpu H100 --gpus-per-node 8")
    else:
        system = System(gpu, gpus_per_node, nodes, count, rate)
    limit = link_limit(system)
    rows = matching(system.model, system.gpus_per_node, system.nodes, collective)
    nic_rows = per_nic(rate) if nodes > 1 and rate else known[:0]
    unknown = "" if system.model else (f"{system.device} is not a GPU the catalogue knows "
                                       f"({', '.join(sorted((set(known['gpu']) | set(links()['gpu'])) - {ANY}))})")
    if limit.GBps is None and rows.empty and nic_rows.empty:
        said = f"{unknown}: name one of them, or" if unknown else \
            f"the catalogue has no link rate and no figure for {system.describe()}:"
        raise UsageError(f"{said} give --nodes 2 or more and --nics for the NICs' limit")
    lines: list[str] = []
    say = lines.append
    say(headline(system, collective))
    if unknown:
        say(f"{unknown}: what follows holds for any GPU")
    say(f"\nLink limit: {f'{limit.GBps:.4g} GB/s busbw' if limit.GBps else 'unknown'}: {limit.bound}"
        + (f"\n  source: {limit.source}" if limit.source else ""))
    if system.model:
        say(f"\nPublished {collective} figures for {system.model} on {'several nodes' if nodes > 1 else 'one node'}, "
            f"closest first ({len(rows)}){_layouts(known, system, collective)}:")
    for _, row in rows.iterrows():
        say("  " + _figure(row))
    if len(nic_rows):
        say(f"\nPublished figures per {rate:g} Gb/s NIC, for any GPU ({len(nic_rows)}):")
    for _, row in nic_rows.iterrows():
        say(f"  per NIC, x {count} NICs = {row['busbw_GBps'] * count:g} GB/s: {_figure(row)}")
    found = settings()
    found = found[(found["applies"] == ("several nodes" if nodes > 1 else "one node"))
                  & found["gpus"].map(lambda gpus: not gpus or (system.model or "") in gpus.split())]
    say(f"\nNCCL settings that change the answer{':' if len(found) else ': none in the catalogue for this system'}")
    for _, row in found.iterrows():
        say(f"  {row['setting']}: {row['effect']}\n    source: {row['source']} ({row['date']})")
    click.echo(wrapped("\n".join(lines)))  # within 120 columns, continuation lines further in
