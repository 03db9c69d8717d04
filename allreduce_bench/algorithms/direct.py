"""Direct: a one-step ReduceScatter to every peer, then a one-step AllGather.

The tensor is cut into N chunks. Step 1: rank r sends chunk j to rank j, for every j != r, all at
once, receives every peer's chunk r into its own buffer and adds them all. Step 2: rank r sends
its summed chunk r to every peer and receives chunk j from rank j straight into place. Two
latencies, N-1 concurrent transfers per rank and step, 2(N-1)/N of the tensor sent in all like
the ring: it fits fully connected nodes (NVSwitch), where all those transfers can run at once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.algorithms import p2p
from allreduce_bench.algorithms.base import INTER, INTRA, Algorithm, Step, chunk_bounds

if TYPE_CHECKING:
    import torch

    from allreduce_bench.measure.world import World


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    flat = tensor.view(-1)
    group, n, me = world.group, world.size, world.rank
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    mine = chunks[me]
    peers = [q for q in range(n) if q != me]
    buffers = [flat.new_empty(mine.numel()) for _ in peers]
    reduce_scatter = p2p.ReduceStep(group, [(chunks[q], group.ranks[q]) for q in peers],
                                    [(mine, b, group.ranks[q]) for q, b in zip(peers, buffers)])
    all_gather = p2p.step(group, [(mine, group.ranks[q]) for q in peers],
                          [(chunks[q], group.ranks[q]) for q in peers])

    def allreduce() -> None:
        reduce_scatter()
        p2p.run(all_gather)

    return allreduce


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Two steps; in each every rank exchanges S/N with each peer: L-1 of them in its node (over
    its own link), N-L in other nodes (the node's uplink carries L (N-L) S/N). (N-1) S/N is added
    in the first step."""
    n, s, per_node = world_size, float(size_bytes), ranks_per_node
    if n < 2:
        return []
    paths = {}
    if per_node > 1:
        paths[INTRA] = (float(per_node - 1), (per_node - 1) * s / n)
    if n > per_node:
        paths[INTER] = (float(n - per_node), per_node * (n - per_node) * s / n)
    return [Step(1, paths, (n - 1) * s / n), Step(1, paths)]


ALGORITHM = Algorithm("direct", "one-step ReduceScatter to every peer, then a one-step AllGather: "
                      "2 latencies, N-1 concurrent transfers per rank", build, cost)
