"""Ring ReduceScatter and ring AllGather (N-1 steps each), and the ring AllReduce made of the two.

The buffer is cut into N chunks (for the AllReduce sizes differ by at most one element and some
are empty when there are fewer elements than ranks). ReduceScatter step s: rank r sends the
partial sum of chunk (r-s-1) mod N to r+1 and receives the partial sum of chunk (r-s-2) mod N
from r-1, adding its own part of that chunk; after N-1 steps it holds the full sum of chunk r.
The partial sums travel through two scratch chunks, so the input is left as it is (an
out-of-place ReduceScatter) unless the output is its chunk r (in place, and the AllReduce).
AllGather step s: rank r sends chunk (r-s) mod N and receives chunk (r-s-1) mod N straight into
place. Each rank sends (N-1)/N of the buffer per phase, whatever N.

The AllReduce is exactly these two plans on one tensor, in place (`RingPlan`); the hierarchical
scheme reuses them inside a node.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import INTER, INTRA, Algorithm, Step, chunk_bounds, in_sequence

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import CommGroup, World

__all__ = ["ALGORITHM", "ALL_GATHER", "REDUCE_SCATTER", "RingPlan", "build", "chunk_bounds", "cost"]


def parts(flat: torch.Tensor, bounds: list[tuple[int, int]]) -> list[torch.Tensor]:
    return [flat[a:b] for a, b in bounds]


def flat_parts(tensor: torch.Tensor, n: int) -> tuple[torch.Tensor, list[tuple[int, int]], list[torch.Tensor]]:
    """The tensor flattened, the bounds of its n parts (chunk_bounds) and the parts as views."""
    flat = tensor.view(-1)
    bounds = chunk_bounds(flat.numel(), n)
    return flat, bounds, parts(flat, bounds)


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() == 0 or (a.data_ptr() == b.data_ptr() and a.numel() == b.numel())


class ReduceScatterPlan:
    """Ring ReduceScatter of `send` (cut at `bounds`, one chunk per member) into `recv`."""

    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        n, r = group.size, group.rank
        chunks = parts(send, bounds)
        longest = max(c.numel() for c in chunks)
        scratch = [send.new_empty(longest) for _ in range(min(2, n - 1))]
        nxt, prv = group.peer(1), group.peer(-1)
        outgoing, self._steps = chunks[(r - 1) % n], []
        for s in range(n - 1):
            mine = chunks[(r - s - 2) % n]
            partial = recv if s == n - 2 else scratch[s % 2][:mine.numel()]
            self._steps.append(p2p.ReduceStep(
                group, sends=[(outgoing, nxt)],
                receives=[(mine, scratch[s % 2][:mine.numel()], prv, partial)]))
            outgoing = partial  # the next step passes this partial sum on
        self._copy = None if n > 1 or same_memory(chunks[r], recv) else (recv, chunks[r])

    def __call__(self) -> None:
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        for reduce in self._steps:
            reduce()


class AllGatherPlan:
    """Ring AllGather of `send` (this member's chunk) into `recv` cut at `bounds`. Out of place,
    the local copy into recv runs while the first step's transfers are in flight."""

    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        n, r = group.size, group.rank
        chunks = parts(recv, bounds)
        nxt, prv = group.peer(1), group.peer(-1)
        self._copy = None if same_memory(send, chunks[r]) else (chunks[r], send)
        self._steps = [
            p2p.step(group, sends=[(send if s == 0 else chunks[(r - s) % n], nxt)],
                     recvs=[(chunks[(r - s - 1) % n], prv)])
            for s in range(n - 1)]

    def __call__(self) -> None:
        requests = p2p.start(self._steps[0]) if self._steps else []
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        for request in requests:
            request.wait()
        for ops in self._steps[1:]:
            p2p.run(ops)


class RingPlan:
    """The ring AllReduce of one tensor on one group: its ReduceScatter, then its AllGather, in
    place. `owned` is the chunk fully reduced here between the two."""

    def __init__(self, tensor: torch.Tensor, group: CommGroup):
        flat, bounds, views = flat_parts(tensor, group.size)
        self.owned = views[group.rank]
        self.reduce_scatter = ReduceScatterPlan(flat, self.owned, bounds, group)
        self.all_gather = AllGatherPlan(self.owned, flat, bounds, group)


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    plan = RingPlan(tensor, world.group)
    return p2p.in_order([plan.reduce_scatter, plan.all_gather])


def build_reduce_scatter(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    return ReduceScatterPlan(send, recv, chunk_bounds(send.numel(), world.size), world.group)


def build_all_gather(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    return AllGatherPlan(send, recv, chunk_bounds(recv.numel(), world.size), world.group)


def ring_paths(world_size: int, ranks_per_node: int, part: float) -> dict[str, tuple[float, float]]:
    """One message of `part` bytes over each class the ring's edges use: intra if L > 1, inter if
    there are several nodes (nodes hold consecutive ranks: one edge out of each node, one in)."""
    return {c: (1.0, part) for c, used in ((INTRA, ranks_per_node > 1),
                                            (INTER, world_size > ranks_per_node)) if used}


def cost_reduce_scatter(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """N-1 steps of S/N (S the whole buffer), S/N added in each."""
    n, s = world_size, float(size_bytes)
    return [Step(n - 1, ring_paths(n, ranks_per_node, s / n), s / n)] if n > 1 else []


def cost_all_gather(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """N-1 steps of S/N, nothing added."""
    n, s = world_size, float(size_bytes)
    return [Step(n - 1, ring_paths(n, ranks_per_node, s / n))] if n > 1 else []


# The ReduceScatter's N-1 steps of S/N, then the AllGather's: 2(N-1) steps of S/N.
cost = in_sequence(cost_reduce_scatter, cost_all_gather)


ALGORITHM = Algorithm("ring", "ReduceScatter then AllGather around a ring: 2(N-1) steps of S/N, "
                      "bandwidth-optimal", build, cost)
REDUCE_SCATTER = Algorithm("ring", "N-1 steps of S/N around a ring, each partial sum passed on: "
                           "bandwidth-optimal", build_reduce_scatter, cost_reduce_scatter,
                           collective="reduce_scatter")
ALL_GATHER = Algorithm("ring", "N-1 steps of S/N around a ring: bandwidth-optimal",
                       build_all_gather, cost_all_gather, collective="all_gather")
