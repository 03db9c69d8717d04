"""Hierarchical AllReduce: ReduceScatter inside the node, AllReduce across nodes, AllGather inside.

(a) the ring's ReduceScatter on the node's group leaves each local rank with the node's sum of
one shard (1/L of the tensor, L = ranks per node); (b) the backend's AllReduce of that shard
among the ranks with the same local rank on every node; (c) the ring's AllGather inside the
node. Only 1/L of the tensor crosses the inter-node link per rank, where a flat ring sends
about twice the tensor over it. One node: (b) is skipped. One rank per node: (a) and (c) are
empty and (b) is the whole AllReduce.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from allreduce_bench.algorithms.ring import RingPlan
from allreduce_bench.measure.world import World


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    node = RingPlan(tensor, world.intra)
    shard, inter = node.owned, world.inter
    across_nodes = inter.size > 1 and shard.numel() > 0  # same shard size on every inter peer

    def allreduce() -> None:
        node.reduce_scatter()
        if across_nodes:
            dist.all_reduce(shard, group=inter.pg)
        node.all_gather()

    return allreduce
