"""`allreduce-bench links`: the two kinds of link (NVLink vs InfiniBand) measured side by side, AllReduce
within every node and across nodes, and p2p sends (doc/cluster.md, "Intra- vs inter-node links")."""
from __future__ import annotations

import torch
import torch.distributed as dist

from allreduce_bench.core import algorithms, metrics
from allreduce_bench.core.config import RunConfig, Sampling
from allreduce_bench.core.measure import collective as measuring
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure import patterns, timing
from allreduce_bench.core.measure.console import HEADER, format_row
from allreduce_bench.core.measure.context import Benchmark
from allreduce_bench.core.measure.device import Device, torch_dtype
from allreduce_bench.core.measure.rank import Session
from allreduce_bench.core.measure.world import CommGroup, World, end_phase, group_timeout, make_world
from allreduce_bench.core.results.schema import samples_frame
from allreduce_bench.core.results.store import start_meta_unless_launched
from allreduce_bench.core.sweep.rows import Point, make_row


def p2p_measure(count: int, dtype: torch.dtype, src: int, dst: int,
                pair: dist.ProcessGroup | None, device: Device,
                sampling: Sampling) -> tuple[timing.Measured, int]:
    """(samples of both sides, #wrong) of sending `count` elements from global rank src to dst, which alone
    call it; the receiver starts with other values and must end with the sender's."""
    me = dist.get_rank()
    tensor = torch.empty(count, dtype=dtype, device=device.torch_device)
    patterns.fill(tensor, 0 if me == src else 1, 2)

    def transfer() -> None:
        if me == src:
            dist.send(tensor, dst, group=pair)
        else:
            dist.recv(tensor, src, group=pair)

    measured = timing.sample(transfer, device, pair, sampling)
    expected = torch.empty_like(tensor)
    patterns.fill(expected, 0, 2)
    wrong = patterns.count_wrong(tensor, expected) if me == dst else 0
    return measured, timing.total(wrong, pair, device)


def _view(group: CommGroup, device: Device) -> World:
    """A world made of one group, so `collective.measure` runs the backend's call on it."""
    return World(group, group, group, group.size, device)


def links_sweep(config: RunConfig, world: World, on_row, hosts: list[str] | None = None) -> int:
    """Every size: intra and inter AllReduce (all groups at once), then p2p intra and inter."""
    device, L = world.device, world.ranks_per_node
    me = dist.get_rank()
    pairs = {"intra": (0, 1), "inter": (0, L)} if L >= 2 else {"inter": (0, L)}
    # every rank in every new_group call, each pair touched by its members at once: torch 2.3/2.4 split a
    # member's communicator at its first collective, a non-member's at creation (algorithms/nccl.py)
    timeout = group_timeout(device, config.launch.timeout_s)
    pair_groups = {}
    for link, ranks in pairs.items():
        pair_groups[link] = dist.new_group(list(ranks), timeout=timeout)
        if me in ranks:
            device.barrier(pair_groups[link])
    wrong_total = 0
    for size in config.sizes:
        count = size // config.itemsize  # the p2p sends: whole elements (options.run_config)
        for link, group in (("intra", world.intra), ("inter", world.inter)):
            if group.size < 2:
                continue
            view = _view(group, device)
            device.barrier(None)  # all groups start together
            measured, wrong, counted, size_bytes = group_measure(config, view, size)
            wrong = timing.total(wrong if group.rank == 0 else 0, None, device)  # each group's once, by its lead
            wrong_total += wrong
            collective = config.collectives[0][0] if config.collectives else "all_reduce"
            operation = "allreduce" if collective == "all_reduce" else collective
            row = _links(make_row(config, view, Point("native", counted, collective, size_bytes),
                                  measured, wrong, range(dist.get_world_size())), world, link, operation)
            on_row(row, samples_frame(row, measured.per_rank_us, range(dist.get_world_size()),
                                      hosts))
        for link, (src, dst) in pairs.items():
            device.barrier(None)
            if me in (src, dst):
                pair = CommGroup(pair_groups[link], (src, dst), (src, dst).index(me))
                measured, wrong = p2p_measure(count, torch_dtype(config.dtype), src, dst, pair.pg, device,
                                              config.sampling)
                if me == 0:
                    wrong_total += wrong
                    row = _links(make_row(config, _view(pair, device), Point("send", count), measured,
                                          wrong), world, link, "p2p")
                    on_row(row, samples_frame(row, measured.per_rank_us, (src, dst), hosts))
        device.barrier(None)
    return wrong_total


def group_measure(config: RunConfig, view: World, size: int) -> tuple[timing.Measured, int, int, int]:
    """(samples, #wrong, count, size_bytes) of the backend's AllReduce (or --collective) in one group, every
    group at once with loops and samples agreed over the world, so the row is the slowest group's."""
    name_of = config.collectives[0][0] if config.collectives else "all_reduce"
    count, size_bytes = metrics.collective_counts(name_of, size, config.itemsize, view.size)
    if count == 0:  # too small to split: one element per rank (every group must measure)
        count, size_bytes = 1, config.itemsize * view.size
    measured, wrong = measuring.measure(algorithms.lookup("native", name_of), view,
                                        measuring.Payload(count, torch_dtype(config.dtype)), config.sampling,
                                        together=timing.Together(agree_over=dist.group.WORLD))
    return measured, wrong, count, size_bytes


def _links(row: dict, world: World, link: str, operation: str) -> dict:
    """A row of a group of `world` as a links row: the whole world's nodes, its link and operation."""
    row.update(benchmark="links", nodes=world.nodes, ranks_per_node=world.ranks_per_node,
               link=link, operation=operation)
    return row


def links_line(row: dict) -> str:
    """A row of the links table: its link and operation, then the core's columns."""
    return f"  {row['link']:>5} {row['operation']:>14}{format_row(row)}"  # reduce_scatter the widest


# the core's HEADER with the link and op columns in front, each over its numbers
LINKS_HEADER = "\n".join(f"#{first:>6} {second:>14} {line[1:]}" for (first, second), line in
                         zip((("link", "op"), ("", "")), HEADER.splitlines()))


def measure_links(session: Session) -> int:
    """The links sweep on the whole world (nodes of the launcher's or --ranks-per-node)."""
    config, env, device = session.config, session.env, session.device
    world = make_world(env.world_size, config.launch.ranks_per_node or env.local_world_size, device,
                       config.launch.timeout_s)
    assert world is not None  # the whole world: every rank is in it
    if session.writer:
        print(f"\n# links: {world.nodes} nodes x {world.ranks_per_node} ranks, {device.kind}\n# intra = AllReduce "
              f"in each node's group, inter = AllReduce across nodes per local rank, p2p = one-way send\n"
              f"{LINKS_HEADER}", flush=True)
    session.show = lambda row: print(links_line(row), flush=True)
    session.progress.at(1, 1, "the links sweep", tuple(range(env.world_size)))
    links = 2 if world.ranks_per_node >= 2 else 1  # intra (when a node has 2 ranks) and inter
    session.expect(len(config.sizes) * links * 2, "links")  # an AllReduce row and a p2p row each
    wrong = links_sweep(config, world, session.record, session.hosts)
    end_phase(world, "links", device)
    return wrong


def prepare(config: RunConfig) -> None:
    start_meta_unless_launched(config, run_meta.host_meta)


def whole_world(config: RunConfig) -> list[int]:
    """links measures one world: the largest world size, split into its nodes."""
    return [max(config.launch.world_sizes)]


BENCHMARK = Benchmark("links", run_meta.host_meta, measure_links, prepare=prepare,
                      world_sizes=whole_world)
