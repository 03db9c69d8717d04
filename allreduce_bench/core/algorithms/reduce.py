"""Reduce to rank 0, in place: binomial tree, pipelined chain N-1 -> 0, ring ReduceScatter + gather."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p, ring
from allreduce_bench.core.algorithms.base import Algorithm, Step, traffic
from allreduce_bench.core.algorithms.broadcast import chain_ticks, chain_views, root_parts, rounds
from allreduce_bench.core.algorithms.tree import chunk_count

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def build_binomial(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, me = world.group, world.rank
    calls: list[Callable[[], object]] = []
    flat = recv.view(-1)
    buffer = flat.new_empty(flat.numel())
    for pairs in reversed(rounds(world.size)):
        for a, b in pairs:  # b sends its partial sum to a
            if me == b:
                calls.append(partial(p2p.run, p2p.step(group, [(flat, group.ranks[a])], [])))
            elif me == a:
                calls.append(p2p.ReduceStep(group, [], [(flat, buffer, group.ranks[b])]))
    return p2p.in_order(calls)


def build_chain(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, n, r = world.group, world.size, world.rank
    views = chain_views(recv)
    chunks, buffer = len(views), recv.new_empty(max(v.numel() for v in views))
    calls, hops = [], n - 1 - r  # rank r is `hops` links from the chain's start, rank N-1
    for tick in range(chain_ticks(n, chunks)):
        out, got = tick - hops, tick - hops + 1
        sends = [(views[out], group.ranks[r - 1])] if r > 0 and 0 <= out < chunks else []
        receives = ([(views[got], buffer[:views[got].numel()], group.ranks[r + 1])]
                    if r < n - 1 and 0 <= got < chunks else [])
        if sends or receives:
            calls.append(p2p.ReduceStep(group, sends, receives))
    return p2p.in_order(calls)


def build_reduce_scatter_gather(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    flat, bounds, views = ring.flat_parts(recv, world.size)
    scatter = ring.ReduceScatterPlan(flat, views[world.rank], bounds, world.group)
    gather = root_parts(world.group, views, world.rank, to_root=True)
    return p2p.in_order([scatter, partial(p2p.run, gather)])


def cost_binomial(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """ceil(log2 N) rounds; in each, the senders pass the whole S, which is added."""
    s = float(size_bytes)
    return [traffic([(b, a, s) for a, b in pairs], ranks_per_node, reduced=s)
            for pairs in reversed(rounds(world_size))]


def cost_chain(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """C + N - 2 ticks; in a full tick every edge r+1 -> r carries S/C, which is added."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    chunks = chunk_count(s, max(1, int(s)))
    edges = [(q + 1, q, s / chunks) for q in range(n - 1)]
    return [traffic(edges, ranks_per_node, reduced=s / chunks, repeat=chain_ticks(n, chunks))]


def cost_reduce_scatter_gather(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """The ring ReduceScatter's N-1 steps of S/N, then N-1 ranks send S/N to the root at once."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    gather = traffic([(q, 0, s / n) for q in range(1, n)], ranks_per_node)
    return ring.cost_reduce_scatter(s, n, ranks_per_node) + [gather]


BINOMIAL = Algorithm("binomial", "binomial tree into rank 0: ceil(log2 N) rounds of the whole "
                     "tensor, each added", build_binomial, cost_binomial, collective="reduce")
CHAIN = Algorithm("chain", "pipelined chain N-1 -> ... -> 0 in chunks: C + N - 2 ticks of S/C",
                  build_chain, cost_chain, collective="reduce")
REDUCE_SCATTER_GATHER = Algorithm("reducescatter-gather", "ring ReduceScatter, then every part to "
                                  "the root: (N-1)/N S into the root", build_reduce_scatter_gather,
                                  cost_reduce_scatter_gather, collective="reduce")
