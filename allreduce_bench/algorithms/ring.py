"""Ring AllReduce from point-to-point steps: ReduceScatter (N-1 steps), then AllGather (N-1).

The tensor is cut into N chunks (sizes differ by at most one element; some are empty when there
are fewer elements than ranks). In ReduceScatter step s, rank r sends chunk (r-s) mod N to
r+1, receives chunk (r-s-1) mod N from r-1 and adds it in; afterwards rank r holds the full sum
of chunk (r+1) mod N. In AllGather step s it sends chunk (r+1-s) mod N and receives chunk
(r-s) mod N straight into place. Each rank sends 2(N-1)/N of the tensor in all, whatever N.

`RingPlan` works on any group, so the hierarchical scheme reuses its two phases inside a node.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.algorithms import p2p
from allreduce_bench.algorithms.base import INTER, INTRA, Algorithm, Step, chunk_bounds

if TYPE_CHECKING:
    import torch

    from allreduce_bench.measure.world import CommGroup, World

__all__ = ["ALGORITHM", "RingPlan", "build", "chunk_bounds", "cost"]


class RingPlan:
    """Chunk views, the receive buffer and every step's ops for one tensor on one group.

    Everything is allocated here, once per size, so the phases themselves only post, wait and add.
    """

    def __init__(self, tensor: torch.Tensor, group: CommGroup):
        n, r = group.size, group.rank
        flat = tensor.view(-1)
        chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
        self.owned = chunks[(r + 1) % n]  # fully reduced here after reduce_scatter()
        buffer = flat.new_empty(max(c.numel() for c in chunks))
        nxt, prv = group.peer(1), group.peer(-1)
        self._reduce_steps = []
        for s in range(n - 1):
            into = chunks[(r - s - 1) % n]
            self._reduce_steps.append(p2p.ReduceStep(
                group, sends=[(chunks[(r - s) % n], nxt)],
                receives=[(into, buffer[:into.numel()], prv)]))
        self._gather_steps = [
            p2p.step(group, sends=[(chunks[(r + 1 - s) % n], nxt)], recvs=[(chunks[(r - s) % n], prv)])
            for s in range(n - 1)]

    def reduce_scatter(self) -> None:
        for reduce in self._reduce_steps:
            reduce()

    def all_gather(self) -> None:
        for ops in self._gather_steps:
            p2p.run(ops)


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    plan = RingPlan(tensor, world.group)

    def allreduce() -> None:
        plan.reduce_scatter()
        plan.all_gather()

    return allreduce


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """2(N-1) steps of S/N over each class the ring's edges use: intra if L > 1, inter if there
    are several nodes (nodes hold consecutive ranks: one edge out of each node and one in);
    S/N reduced in each of the N-1 ReduceScatter steps."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    edge = (1.0, s / n)
    paths = {c: edge for c, used in ((INTRA, ranks_per_node > 1), (INTER, n > ranks_per_node)) if used}
    return [Step(n - 1, paths, s / n), Step(n - 1, paths)]


ALGORITHM = Algorithm("ring", "ReduceScatter then AllGather around a ring: 2(N-1) steps of S/N, "
                      "bandwidth-optimal", build, cost)
