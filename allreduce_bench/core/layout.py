"""Node layout: nodes are runs of `ranks_per_node` consecutive ranks (for world.py and the cost model)."""
from __future__ import annotations

from allreduce_bench.core.errors import UsageError


def node_layout(world_size: int, ranks_per_node: int) -> int:
    """Ranks per node of a (sub-)world: a part of one node, or whole nodes; raises on a bad layout."""
    if ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node must be at least 1, got {ranks_per_node}")
    if world_size <= ranks_per_node:
        return world_size
    if world_size % ranks_per_node:
        raise UsageError(f"world size {world_size} is not a whole number of nodes of "
                         f"{ranks_per_node} ranks; choose --world-sizes that are multiples of "
                         f"--ranks-per-node {ranks_per_node}")
    return ranks_per_node
