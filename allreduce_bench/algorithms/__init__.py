"""The registry: algorithm name -> build(tensor, world) -> a call that sums `tensor` in place.

`build` does all allocation and planning for one tensor; the returned call is what gets timed.
Adding an algorithm is one module with a `build` and one line here.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from allreduce_bench.algorithms import hierarchical, naive, native, ring
from allreduce_bench.errors import UsageError
from allreduce_bench.measure.world import World

Builder = Callable[[torch.Tensor, World], Callable[[], None]]

ALGORITHMS: dict[str, Builder] = {
    "native": native.build,
    "ring": ring.build,
    "naive": naive.build,
    "hierarchical": hierarchical.build,
}


def get(name: str) -> Builder:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UsageError(f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}") from None


def allreduce(name: str, tensor: torch.Tensor, world: World) -> None:
    """One-off in-place SUM AllReduce with the named algorithm (allocates; not for timing)."""
    get(name)(tensor, world)()
