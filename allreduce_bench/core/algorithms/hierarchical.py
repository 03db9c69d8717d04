"""Hierarchical AllReduce: ring ReduceScatter inside the node, the backend's AllReduce of each 1/L shard
across nodes, ring AllGather inside: 1/L of the tensor crosses nodes per rank."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import ring
from allreduce_bench.core.algorithms.base import INTER, INTRA, Algorithm, Step

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def build(tensor: torch.Tensor, world: World, slice_bytes: int = ring.SLICE_BYTES) -> Callable[[], None]:
    import torch.distributed as dist

    node = ring.plan(tensor, world.intra, world, slice_bytes)
    shard, inter = node.owned, world.inter
    across_nodes = inter.size > 1 and shard.numel() > 0  # same shard size on every inter peer

    def allreduce() -> None:
        node.reduce_scatter()
        if across_nodes:
            dist.all_reduce(shard, group=inter.pg)
        node.all_gather()

    return allreduce


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Intra: 2(L-1) ring steps of S/L; inter: ring AllReduces of the L shards sharing the uplink."""
    s, per_node = float(size_bytes), ranks_per_node
    nodes = world_size // per_node
    out = []
    if per_node > 1:
        out += [Step(per_node - 1, {INTRA: (1.0, s / per_node)}, s / per_node),
                Step(per_node - 1, {INTRA: (1.0, s / per_node)})]
    if nodes > 1:
        out += [Step(nodes - 1, {INTER: (1.0, s / nodes)}, s / (per_node * nodes)),
                Step(nodes - 1, {INTER: (1.0, s / nodes)})]
    return out


ALGORITHM = Algorithm("hierarchical", "ReduceScatter inside each node, AllReduce of each shard "
                      "across nodes, AllGather inside: 1/L of the tensor crosses nodes", build, cost)
