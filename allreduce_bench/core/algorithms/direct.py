"""Direct: one-step ReduceScatter and AllGather to every peer at once, and the AllReduce of both: one latency
each, N-1 concurrent transfers per rank, for fully connected nodes (NVSwitch)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import INTER, INTRA, Algorithm, Step, chunk_bounds, in_sequence
from allreduce_bench.core.algorithms.ring import parts, same_memory

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import CommGroup, World


class ReduceScatterPlan:
    """`send` cut at `bounds`; the sum of everyone's chunk r lands in `recv`."""

    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        chunks, me = parts(send, bounds), group.rank
        peers = [q for q in range(group.size) if q != me]
        buffers = [send.new_empty(recv.numel()) for _ in peers]
        # the first add writes own + buffer into recv, the others add into recv
        receives = [(chunks[me] if i == 0 else recv, b, group.ranks[q], recv)
                    for i, (q, b) in enumerate(zip(peers, buffers))]
        self._step = p2p.ReduceStep(group, [(chunks[q], group.ranks[q]) for q in peers], receives)
        self._copy = None if peers or same_memory(chunks[me], recv) else (recv, chunks[me])

    def __call__(self) -> None:
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        self._step()


class AllGatherPlan:
    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        chunks, me = parts(recv, bounds), group.rank
        peers = [q for q in range(group.size) if q != me]
        self._ops = p2p.step(group, [(send, group.ranks[q]) for q in peers],
                             [(chunks[q], group.ranks[q]) for q in peers])
        self._copy = None if same_memory(send, chunks[me]) else (chunks[me], send)

    def __call__(self) -> None:
        requests = p2p.start(self._ops)
        if self._copy:  # while the transfers are in flight
            self._copy[0].copy_(self._copy[1])
        for request in requests:
            request.wait()


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    flat = tensor.view(-1)
    bounds = chunk_bounds(flat.numel(), world.size)
    mine = parts(flat, bounds)[world.rank]
    return p2p.in_order([ReduceScatterPlan(flat, mine, bounds, world.group),
                         AllGatherPlan(mine, flat, bounds, world.group)])


def build_reduce_scatter(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    return ReduceScatterPlan(send, recv, chunk_bounds(send.numel(), world.size), world.group)


def build_all_gather(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    return AllGatherPlan(send, recv, chunk_bounds(recv.numel(), world.size), world.group)


def one_step(size_bytes: float, world_size: int, ranks_per_node: int, reduced: float) -> list[Step]:
    """Every rank exchanges S/N with each peer; the node's uplink carries L (N-L) S/N."""
    n, s, per_node = world_size, float(size_bytes), ranks_per_node
    if n < 2:
        return []
    paths = {}
    if per_node > 1:
        paths[INTRA] = (float(per_node - 1), (per_node - 1) * s / n)
    if n > per_node:
        paths[INTER] = (float(n - per_node), per_node * (n - per_node) * s / n)
    return [Step(1, paths, reduced)]


def cost_reduce_scatter(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """One step of S/N to each peer; (N-1) S/N added."""
    n = world_size
    return one_step(size_bytes, n, ranks_per_node, (n - 1) * float(size_bytes) / n)


def cost_all_gather(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    return one_step(size_bytes, world_size, ranks_per_node, 0.0)


# The ReduceScatter's step, then the AllGather's.
cost = in_sequence(cost_reduce_scatter, cost_all_gather)


ALGORITHM = Algorithm("direct", "one-step ReduceScatter to every peer, then a one-step AllGather: "
                      "2 latencies, N-1 concurrent transfers per rank", build, cost)
REDUCE_SCATTER = Algorithm("direct", "every peer's part sent at once and added: 1 latency, N-1 "
                           "concurrent transfers per rank", build_reduce_scatter,
                           cost_reduce_scatter, collective="reduce_scatter")
ALL_GATHER = Algorithm("direct", "this rank's part sent to every peer at once: 1 latency, N-1 "
                       "concurrent transfers per rank", build_all_gather, cost_all_gather,
                       collective="all_gather")
