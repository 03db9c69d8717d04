"""Broadcast from rank 0, in place as torch's: binomial tree (fewest latencies), pipelined chain, and scatter
+ ring AllGather (van de Geijn: the bandwidth winner)."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p, ring
from allreduce_bench.core.algorithms.base import Algorithm, Step, chunk_bounds, traffic
from allreduce_bench.core.algorithms.tree import chunk_count

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Binomial tree from rank 0: per round, the (sender, receiver) pairs."""
    out, mask = [], 1
    while mask < n:
        out.append([(q, q + mask) for q in range(mask) if q + mask < n])
        mask *= 2
    return out


def chain_ticks(n: int, chunks: int) -> int:
    return chunks + n - 2 if n > 1 else 0


def build_binomial(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, me, calls = world.group, world.rank, []
    for pairs in rounds(world.size):
        for a, b in pairs:
            if me in (a, b):
                ops = (p2p.step(group, [(recv, group.ranks[b])], []) if me == a
                       else p2p.step(group, [], [(recv, group.ranks[a])]))
                calls.append(partial(p2p.run, ops))
    return p2p.in_order(calls)


def chain_views(tensor: torch.Tensor) -> list[torch.Tensor]:
    flat = tensor.view(-1)
    chunks = chunk_count(flat.numel() * flat.element_size(), max(1, flat.numel()))
    return [flat[a:b] for a, b in chunk_bounds(flat.numel(), chunks)]


def build_chain(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, n, r = world.group, world.size, world.rank
    views = chain_views(recv)
    chunks, calls = len(views), []
    for tick in range(chain_ticks(n, chunks)):
        sends = [(views[tick - r], group.ranks[r + 1])] if r < n - 1 and 0 <= tick - r < chunks else []
        got = tick - r + 1
        recvs = [(views[got], group.ranks[r - 1])] if r > 0 and 0 <= got < chunks else []
        if sends or recvs:
            calls.append(partial(p2p.run, p2p.step(group, sends, recvs)))
    return p2p.in_order(calls)


def root_parts(group, views: list[torch.Tensor], rank: int, to_root: bool = False) -> p2p.Ops:
    """Part q between the root and each rank q > 0: a scatter, or with `to_root` a gather."""
    if rank == 0:
        others = [(views[q], group.ranks[q]) for q in range(1, len(views))]
        return p2p.step(group, [], others) if to_root else p2p.step(group, others, [])
    mine = [(views[rank], group.ranks[0])]
    return p2p.step(group, mine, []) if to_root else p2p.step(group, [], mine)


def build_scatter_all_gather(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    flat, bounds, views = ring.flat_parts(recv, world.size)
    scatter = root_parts(world.group, views, world.rank)
    gather = ring.AllGatherPlan(views[world.rank], flat, bounds, world.group)
    return p2p.in_order([partial(p2p.run, scatter), gather])


def cost_binomial(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """ceil(log2 N) rounds; in each, the senders pass the whole S."""
    s = float(size_bytes)
    return [traffic([(a, b, s) for a, b in pairs], ranks_per_node) for pairs in rounds(world_size)]


def cost_chain(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """C + N - 2 ticks; in a full tick every edge r -> r+1 carries S/C."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    chunks = chunk_count(s, max(1, int(s)))
    edges = [(q, q + 1, s / chunks) for q in range(n - 1)]
    return [traffic(edges, ranks_per_node, repeat=chain_ticks(n, chunks))]


def cost_scatter_all_gather(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """The root sends S/N to each of N-1 ranks at once, then the ring AllGather's N-1 steps."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    scatter = traffic([(0, q, s / n) for q in range(1, n)], ranks_per_node)
    return [scatter] + ring.cost_all_gather(s, n, ranks_per_node)


BINOMIAL = Algorithm("binomial", "binomial tree from rank 0: ceil(log2 N) rounds of the whole "
                     "tensor", build_binomial, cost_binomial, collective="broadcast")
CHAIN = Algorithm("chain", "pipelined chain 0 -> 1 -> ... -> N-1 in chunks: C + N - 2 ticks of "
                  "S/C", build_chain, cost_chain, collective="broadcast")
SCATTER_ALL_GATHER = Algorithm("scatter-allgather", "the root scatters N parts, then a ring "
                               "AllGather: (N-1)/N S out of the root", build_scatter_all_gather,
                               cost_scatter_all_gather, collective="broadcast")
